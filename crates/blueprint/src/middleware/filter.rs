//! `sensitive_filter`: every string of a value searched for the platform's
//! listed words; those with a replacement are replaced, then the value is
//! searched again. Deterministic: the same value and config give the same
//! result, findings in the order the strings and words appear.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::MiddlewareConfig;

/// A listed word found in one string of the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The listed word.
    pub word: String,
    /// The board path of the string (`content.hook.variants.1.content`).
    pub path: String,
    /// Every occurrence was replaced (and the word is not back after replacing).
    pub fixed: bool,
    /// What replaced the word, or would have: `None` when none is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
}

/// What [`sensitive_filter`] made of a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Filtered {
    /// The value with every replacement made.
    pub value: Value,
    /// Each word found in each string, once per string; a word that is still
    /// there after replacing is a second finding with `fixed: false`.
    pub findings: Vec<Finding>,
    /// No listed word is left in `value`.
    pub passed: bool,
}

impl Filtered {
    /// Notes of the replacements made, for `control.sensitive_filter.fixes_applied`.
    pub fn fixes_applied(&self) -> Vec<String> {
        self.findings.iter().filter(|f| f.fixed).map(fix_note).collect()
    }

    /// Notes of the words left, for a retry's `feedback` and the attempt's error.
    pub fn unfixed(&self) -> Vec<String> {
        self.findings.iter().filter(|f| !f.fixed).map(fix_note).collect()
    }
}

/// A finding in a sentence: `sensitive word "最好" replaced by "很好" in
/// content.hook.selected`, or `sensitive word "国家级" in content.hook.selected
/// (no replacement configured)`.
pub fn fix_note(f: &Finding) -> String {
    let at = if f.path.is_empty() { "the value" } else { f.path.as_str() };
    match (&f.replacement, f.fixed) {
        (Some(r), true) => format!("sensitive word {:?} replaced by {r:?} in {at}", f.word),
        (Some(_), false) => format!("sensitive word {:?} in {at} (still there after replacing)", f.word),
        (None, _) => format!("sensitive word {:?} in {at} (no replacement configured)", f.word),
    }
}

/// Searches every string in `value` (inside objects and arrays, at any depth)
/// for the words listed for `platform` and for `all`, longest first, and
/// replaces those with a replacement; then searches the result again.
///
/// `path` is the board path of `value`; a string's path adds the keys and
/// indices on the way, joined by `.`. Object keys are not searched (board keys
/// are ASCII names). Words match exactly (case and all).
pub fn sensitive_filter(cfg: &MiddlewareConfig, platform: &str, path: &str, value: &Value) -> Filtered {
    let words = cfg.words_for(platform);
    let mut findings = Vec::new();
    let value = if words.is_empty() {
        value.clone()
    } else {
        walk(value, path, &mut |text, at| filter_text(cfg, &words, text, at, &mut findings))
    };
    let passed = findings.iter().all(|f| f.fixed);
    Filtered { value, findings, passed }
}

/// `value` with `f(text, path)` in place of each string.
fn walk(value: &Value, at: &str, f: &mut dyn FnMut(&str, &str) -> String) -> Value {
    let join = |key: &str| if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") };
    match value {
        Value::String(s) => Value::String(f(s, at)),
        Value::Array(items) => {
            Value::Array(items.iter().enumerate().map(|(i, x)| walk(x, &join(&i.to_string()), f)).collect())
        }
        Value::Object(map) => Value::Object(map.iter().map(|(k, x)| (k.clone(), walk(x, &join(k), f))).collect()),
        other => other.clone(),
    }
}

/// One string: replace, record, search again.
fn filter_text(cfg: &MiddlewareConfig, words: &[&str], text: &str, at: &str, findings: &mut Vec<Finding>) -> String {
    let mut first = Vec::new();
    let fixed = scan(text, words, &mut first, |w| cfg.replacements.get(w).map(String::as_str));
    let mut again = Vec::new();
    scan(&fixed, words, &mut again, |_| None);
    for word in &first {
        let replacement = cfg.replacements.get(*word).cloned();
        findings.push(Finding {
            word: (*word).to_owned(),
            path: at.to_owned(),
            fixed: replacement.is_some(),
            replacement,
        });
    }
    // A word without a replacement found the first time is already a finding
    // with `fixed: false`; anything else found again is new: a replacement made it.
    let known_unfixed = |w: &&str| first.contains(w) && !cfg.replacements.contains_key(*w);
    for word in again.into_iter().filter(|w| !known_unfixed(w)) {
        findings.push(Finding {
            word: word.to_owned(),
            path: at.to_owned(),
            fixed: false,
            replacement: cfg.replacements.get(word).cloned(),
        });
    }
    fixed
}

/// Left to right, the longest listed word at each position (`words` is sorted
/// longest first); `found` gets each word once, in order of first occurrence.
/// Returns the text with each found word replaced by `replace(word)`, if any.
fn scan<'w, 'r>(
    text: &str,
    words: &[&'w str],
    found: &mut Vec<&'w str>,
    replace: impl Fn(&str) -> Option<&'r str>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        match words.iter().find(|w| rest.starts_with(**w)) {
            Some(word) => {
                if !found.contains(word) {
                    found.push(word);
                }
                out.push_str(replace(word).unwrap_or(word));
                rest = &rest[word.len()..];
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
