//! What every crate's config section shares: [`ConfigError`] (a bad value and the
//! `section.key` it was written under), [`ByteSize`] (`"16 MiB"`), the cron
//! [`Schedule`], and [`duration`] for an optional duration key.
//!
//! Each library crate deserializes its own section of `clawboard.toml` and resolves
//! it into its settings with these; the binary only reads the file, applies the
//! environment and the flags, and names the file in front of the error.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A config value that is wrong. Displays as `section.key: reason`; the binary puts
/// the file in front (`/etc/clawboard.toml: key sync.concurrency: 0 is out of range 1..=256`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ConfigError {
    /// The key as written in the file: `sync.s3.bucket`, `roles.w.command`.
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError { key: key.into(), reason: reason.into() }
    }
}

/// The optional duration `key` (`"30s"`, `"5m"`), else `default`.
pub fn duration(key: &str, value: Option<String>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        Some(text) => crate::duration::parse_duration(&text).map_err(|e| ConfigError::new(key, e)),
        None => Ok(default),
    }
}

/// A size in bytes, written as a number or as `"16 MiB"`, `"512 KiB"`, `"1 GB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size; write e.g. \"16 MiB\" or 16777216"))?;
        let mult: u64 = match unit.trim() {
            "" | "B" | "bytes" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            other => {
                return Err(format!("unknown unit {other:?} in {s:?}; use B, KiB, MiB, GiB, KB, MB or GB"));
            }
        };
        n.checked_mul(mult).map(ByteSize).ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a byte count or a string like \"16 MiB\""))?
        {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => ByteSize::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// A cron schedule (the `cron` crate), accepting the usual five fields (minute
/// first) as well as six or seven (seconds first; for tests, down to seconds).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub text: String,
    inner: cron::Schedule,
}

impl Schedule {
    /// Parses `text`, the value of `key`.
    pub fn parse(key: &str, text: &str) -> Result<Schedule, ConfigError> {
        let fields = text.split_whitespace().count();
        let full = match fields {
            5 => format!("0 {text}"),
            6 | 7 => text.to_owned(),
            n => {
                return Err(ConfigError::new(
                    key,
                    format!("{text:?}: a cron schedule has 5 fields (or 6 with seconds), not {n}"),
                ));
            }
        };
        let inner = cron::Schedule::from_str(&full).map_err(|e| ConfigError::new(key, format!("{text:?}: {e}")))?;
        // A valid schedule that never comes (30 February) would be a job that never runs.
        if inner.upcoming(chrono::Utc).next().is_none() {
            return Err(ConfigError::new(key, format!("{text:?} never comes (no such date); the job would never run")));
        }
        Ok(Schedule { text: text.to_owned(), inner })
    }

    /// The optional schedule `key`, else `default`.
    pub fn parse_or(key: &str, value: Option<String>, default: &str) -> Result<Schedule, ConfigError> {
        Schedule::parse(key, value.as_deref().unwrap_or(default))
    }

    /// The first run strictly after `t`.
    pub fn next_after(&self, t: chrono::DateTime<chrono::Utc>) -> Option<chrono::DateTime<chrono::Utc>> {
        self.inner.after(&t).next()
    }

    /// How long from now until the next run.
    pub fn until_next(&self) -> Duration {
        let now = chrono::Utc::now();
        self.inner.after(&now).next().and_then(|t| (t - now).to_std().ok()).unwrap_or(Duration::from_secs(300))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_take_five_or_six_fields() {
        assert!(Schedule::parse("s", "*/5 * * * *").is_ok());
        assert!(Schedule::parse("s", "*/2 * * * * *").is_ok());
        let never = Schedule::parse("retention.schedule", "0 0 30 2 *").unwrap_err().to_string();
        assert!(never.contains("never comes"), "{never}");
        assert!(Schedule::parse("s", "0 0 29 2 *").is_ok(), "29 February comes in leap years");
        let e = Schedule::parse("sync.schedule", "every 5 minutes").unwrap_err().to_string();
        assert!(e.contains("sync.schedule") && e.contains("5 fields"), "{e}");
        let e = Schedule::parse("sync.schedule", "99 * * * *").unwrap_err().to_string();
        assert!(e.contains("sync.schedule"), "{e}");
        let s = Schedule::parse("s", "* * * * * *").unwrap();
        assert!(s.until_next() <= Duration::from_secs(1));
    }

    #[test]
    fn sizes() {
        assert_eq!(ByteSize::parse("16 MiB"), Ok(ByteSize(16 << 20)));
        assert_eq!(ByteSize::parse("10KB"), Ok(ByteSize(10_000)));
        assert_eq!(ByteSize::parse("7"), Ok(ByteSize(7)));
        assert!(ByteSize::parse("MiB").is_err());
        assert!(ByteSize::parse("99999999999999 GiB").is_err());
    }

    #[test]
    fn a_missing_duration_is_the_default_and_a_bad_one_names_the_key() {
        assert_eq!(duration("k", None, Duration::from_secs(3)), Ok(Duration::from_secs(3)));
        assert_eq!(duration("k", Some("2m".into()), Duration::ZERO), Ok(Duration::from_secs(120)));
        let e = duration("sync.lease", Some("soon".into()), Duration::ZERO).unwrap_err();
        assert_eq!(e.key, "sync.lease");
        assert!(e.to_string().starts_with("sync.lease: \"soon\" is not a duration"), "{e}");
    }
}
