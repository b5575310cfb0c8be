//! The GitHub issue-comment form of an entry (seed 004 §4):
//!
//! ```text
//! <!-- blackboard:doc_update_v1 -->
//!
//! json
//! { … one JSON object, double quotes only … }
//! ```
//!
//! [`parse`] follows the seed's reader (§4.2): the comment starts with a
//! `<!-- blackboard:… -->` marker; the JSON is everything after the `json` line,
//! to the end. It also takes the object inside a fenced json block after the
//! marker, as people paste it. Every refusal names the rule that failed.

use clawboard_core::formats::Entry;
use clawboard_core::kind::PathContext;
use clawboard_core::store::to_pretty_json;

/// The Doc Update lane's marker (configurable per lane).
pub const DEFAULT_MARKER: &str = "blackboard:doc_update_v1";

/// The rule of §4.2 a comment broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommentError {
    #[error("rule 1 (marker): {0}")]
    Marker(String),
    #[error("rule 2 (json line): {0}")]
    JsonLine(String),
    #[error("rule 3 (one JSON object): {0}")]
    Json(String),
    #[error("rule 4 (entry fields): {0}")]
    Entry(String),
}

/// An entry read from a comment, with the marker it carried (`blackboard:…`).
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub marker: String,
    pub entry: Entry,
}

/// The comment for `entry` under `marker` (`blackboard:doc_update_v1`), exactly
/// the seed's four-part form, JSON indented by two spaces, ending in a newline.
pub fn render(entry: &Entry, marker: &str) -> String {
    format!("<!-- {marker} -->\n\njson\n{}", to_pretty_json(entry))
}

/// The marker of a comment's first line, if it is `<!-- blackboard:NAME -->`.
fn marker_of(line: &str) -> Option<&str> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let name = inner.strip_prefix("blackboard:")?;
    (!name.is_empty() && !name.contains(char::is_whitespace)).then_some(inner)
}

/// Whether `text` is a blackboard comment at all (starts with a marker), so a
/// reader of an issue's comments can skip the others without reporting them.
pub fn has_marker(text: &str) -> bool {
    text.trim_start_matches('\u{feff}').lines().find(|l| !l.trim().is_empty()).and_then(marker_of).is_some()
}

/// Reads an entry from a comment by the seed's rules.
pub fn parse(text: &str) -> Result<Parsed, CommentError> {
    let text = text.trim_start_matches('\u{feff}');
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let first = lines.iter().position(|l| !l.trim().is_empty()).ok_or_else(|| {
        CommentError::Marker("the comment is empty; it must start with <!-- blackboard:NAME -->".to_owned())
    })?;
    let marker = marker_of(lines[first]).ok_or_else(|| {
        CommentError::Marker(format!(
            "the first line is {:?}; a blackboard comment starts with <!-- blackboard:NAME -->",
            truncate(lines[first])
        ))
    })?;
    let rest = &lines[first + 1..];
    let Some(at) = rest.iter().position(|l| {
        let l = l.trim();
        l == "json" || l.starts_with("```json") || l.starts_with("~~~json")
    }) else {
        return Err(CommentError::JsonLine(
            "no line saying json (or a ```json fence) after the marker; the seed's form is the marker, an empty line, json, then the object".to_owned(),
        ));
    };
    let opening = rest[at].trim();
    let body = if opening == "json" {
        rest[at + 1..].join("\n")
    } else {
        let fence = &opening[..3];
        let close = rest[at + 1..]
            .iter()
            .position(|l| l.trim() == fence)
            .ok_or_else(|| CommentError::JsonLine(format!("the {fence}json block is never closed with {fence}")))?;
        rest[at + 1..at + 1 + close].join("\n")
    };
    let value = clawboard_core::json::parse_value(body.trim().as_bytes()).map_err(|e| {
        let hint = if body.contains('\'') { " (JSON takes double quotes only)" } else { "" };
        CommentError::Json(format!("{e}{hint}"))
    })?;
    if !value.is_object() {
        return Err(CommentError::Json(format!("the JSON is {}, not an object", kind_of(&value))));
    }
    let bytes = serde_json::to_vec(&value).map_err(|e| CommentError::Json(e.to_string()))?;
    let entry = clawboard_core::validate::parse::<Entry>("comment", &bytes, &PathContext::default())
        .map_err(|e| CommentError::Entry(e.to_string()))?;
    Ok(Parsed { marker: marker.to_owned(), entry })
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn truncate(line: &str) -> String {
    line.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = r#"{"id": "e1", "from": "Human", "to": "Aya", "project_id": "p", "kind": "k",
        "status": "open", "payload": {}, "target_docs": [],
        "created_at": "2025-11-30T02:30:00+09:00", "updated_at": "2025-11-30T02:30:00+09:00"}"#;

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_fenced_block_as_people_paste_it_is_read_too() {
        for fence in ["```", "~~~"] {
            let text =
                format!("<!-- blackboard:doc_update_v1 -->\r\n\r\n{fence}json\r\n{ENTRY}\r\n{fence}\r\nthanks!\r\n");
            assert_eq!(parse(&text).unwrap().entry.id.as_str(), "e1");
        }
    }

    #[test]
    fn other_markers_are_kept() {
        let text = format!("<!-- blackboard:release_v2 -->\n\njson\n{ENTRY}");
        assert_eq!(parse(&text).unwrap().marker, "blackboard:release_v2");
        assert!(has_marker(&text));
        assert!(!has_marker("LGTM"));
    }

    #[test]
    fn each_failure_names_its_rule() {
        assert!(err("").starts_with("rule 1 (marker): the comment is empty"));
        assert!(err("LGTM\n\njson\n{}").starts_with("rule 1 (marker): the first line is \"LGTM\""));
        assert!(err("<!-- note -->\njson\n{}").starts_with("rule 1"));
        assert!(err("<!-- blackboard:x -->\n\n{}").starts_with("rule 2 (json line): no line saying json"));
        assert!(err("<!-- blackboard:x -->\n```json\n{}\n").contains("never closed"));
        assert!(err("<!-- blackboard:x -->\n\njson\n{'id': 'e1'}").contains("double quotes only"));
        assert!(err("<!-- blackboard:x -->\n\njson\n{\"id\": ").starts_with("rule 3"));
        assert!(err("<!-- blackboard:x -->\n\njson\n[1, 2]").contains("an array, not an object"));
        let bad = ENTRY.replace("\"open\"", "\"closed\"");
        let e = err(&format!("<!-- blackboard:x -->\n\njson\n{bad}"));
        assert!(e.starts_with("rule 4 (entry fields)") && e.contains("/status"), "{e}");
    }
}
