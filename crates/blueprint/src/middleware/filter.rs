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

/// Replacement passes over one string at most: a replacement can make a listed
/// word with the text around it (`最最强` → `最强大`), which the next pass fixes.
const MAX_PASSES: usize = 4;

/// Searches every string in `value` (inside objects and arrays, at any depth)
/// for the words listed for `platform` and for `all`, longest first, and
/// replaces those with a replacement, again while a replacement made a listed
/// word (at most [`MAX_PASSES`] times); then searches the result once more.
///
/// `path` is the board path of `value`; a string's path adds the keys and
/// indices on the way, joined by `.`. Object keys are not searched (board keys
/// are ASCII names). Text and words are compared folded ([`fold`]): a word is
/// found written in full-width forms, in another case, or split by invisible
/// characters or by line breaks between Chinese characters.
pub fn sensitive_filter(cfg: &MiddlewareConfig, platform: &str, path: &str, value: &Value) -> Filtered {
    let words: Vec<Word<'_>> = cfg
        .words_for(platform)
        .into_iter()
        .map(|w| Word { text: w, folded: fold(w).chars, replacement: cfg.replacements.get(w).map(String::as_str) })
        .filter(|w| !w.folded.is_empty())
        .collect();
    let mut words = words;
    // Longest first (folded), so `最好` is found before `最`.
    words.sort_by(|a, b| b.folded.len().cmp(&a.folded.len()).then_with(|| a.text.cmp(b.text)));
    let mut findings = Vec::new();
    let value = if words.is_empty() {
        value.clone()
    } else {
        walk(value, path, &mut |text, at| filter_text(&words, text, at, &mut findings))
    };
    let passed = findings.iter().all(|f| f.fixed);
    Filtered { value, findings, passed }
}

/// A listed word: as configured, folded, and what replaces it.
struct Word<'a> {
    text: &'a str,
    folded: Vec<char>,
    replacement: Option<&'a str>,
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

/// One string: replace while replacements are found, search again, record.
fn filter_text(words: &[Word<'_>], text: &str, at: &str, findings: &mut Vec<Finding>) -> String {
    let mut found: Vec<usize> = Vec::new();
    let mut text = text.to_owned();
    for _ in 0..MAX_PASSES {
        let hits = scan(&text, words);
        for h in &hits {
            if !found.contains(&h.word) {
                found.push(h.word);
            }
        }
        if !hits.iter().any(|h| words[h.word].replacement.is_some()) {
            break;
        }
        text = replace(&text, &hits, words);
    }
    let left = scan(&text, words);
    for &i in &found {
        let w = &words[i];
        findings.push(Finding {
            word: w.text.to_owned(),
            path: at.to_owned(),
            fixed: w.replacement.is_some() && !left.iter().any(|h| h.word == i),
            replacement: w.replacement.map(str::to_owned),
        });
    }
    text
}

/// A listed word found: which, and the bytes of the text it covers.
struct Hit {
    word: usize,
    start: usize,
    end: usize,
}

/// Left to right, the longest listed word at each place of the folded text.
fn scan(text: &str, words: &[Word<'_>]) -> Vec<Hit> {
    let f = fold(text);
    let mut hits = Vec::new();
    let mut i = 0;
    while i < f.chars.len() {
        let rest = &f.chars[i..];
        match words.iter().position(|w| rest.starts_with(&w.folded)) {
            Some(w) => {
                let n = words[w].folded.len();
                hits.push(Hit { word: w, start: f.spans[i].0, end: f.spans[i + n - 1].1 });
                i += n;
            }
            None => i += 1,
        }
    }
    hits
}

/// `text` with each hit whose word has a replacement replaced (what lay between
/// its letters, invisible characters or a line break, goes with it).
fn replace(text: &str, hits: &[Hit], words: &[Word<'_>]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for h in hits {
        if let Some(r) = words[h.word].replacement
            && h.start >= at
        {
            out.push_str(&text[at..h.start]);
            out.push_str(r);
            at = h.end;
        }
    }
    out.push_str(&text[at..]);
    out
}

/// A text made comparable: each kept character, and the bytes of the original
/// it stands for.
pub(crate) struct Folded {
    pub(crate) chars: Vec<char>,
    spans: Vec<(usize, usize)>,
}

/// Characters that show nothing: zero-width spaces and joiners, soft hyphens,
/// bidirectional marks, variation selectors, the byte-order mark.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{E0100}'..='\u{E01EF}')
}

/// Folds `text` for matching: compatibility forms to their plain ones (NFKC per
/// character: `１００％` is `100%`), lower case, invisible characters dropped, and
/// white space (line breaks too) dropped between two characters outside ASCII
/// (Chinese text has no spaces; `第\n一` is `第一`, `a b` stays two words).
pub(crate) fn fold(text: &str) -> Folded {
    use unicode_normalization::UnicodeNormalization;

    let mut out = Folded { chars: Vec::with_capacity(text.len()), spans: Vec::with_capacity(text.len()) };
    // White space waiting to be kept or dropped: (char, span).
    let mut gap: Vec<(char, (usize, usize))> = Vec::new();
    for (i, c) in text.char_indices() {
        let span = (i, i + c.len_utf8());
        if invisible(c) {
            continue;
        }
        for n in std::iter::once(c).nfkc() {
            if invisible(n) {
                continue;
            }
            if n.is_whitespace() {
                gap.push((n, span));
                continue;
            }
            if !gap.is_empty() {
                let between_wide = out.chars.last().is_some_and(|p| !p.is_ascii()) && !n.is_ascii();
                if !between_wide {
                    for (g, gs) in gap.drain(..) {
                        out.chars.push(g);
                        out.spans.push(gs);
                    }
                }
                gap.clear();
            }
            for l in n.to_lowercase() {
                out.chars.push(l);
                out.spans.push(span);
            }
        }
    }
    for (g, gs) in gap {
        out.chars.push(g);
        out.spans.push(gs);
    }
    out
}

#[cfg(test)]
mod tests;
