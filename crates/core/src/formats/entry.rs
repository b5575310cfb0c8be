//! `entries/{project_id}/{id}.json`: a blackboard entry (seed 004), a small
//! addressed message from one actor to another. Field names are the seed's
//! (snake_case), in the seed's order, so an entry written in that order reads and
//! writes back byte for byte; fields the seed does not name are kept.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::task::names;
use super::{Extra, is_empty_map};
use crate::{Id, Timestamp};

/// Where an entry is in its life (seed 004 §2.2, §3): `open` (not yet taken up by
/// the actor it is addressed to), `in_progress` (being handled), `done` (handled),
/// `error` (handling failed, or the payload was unusable), `canceled` (no longer
/// needed: a human's or a higher role's call).
// No doc comment on a variant: with one, the schema lists the values apart and a
// refusal names only one of them ("must be \"open\"") instead of all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    Open,
    InProgress,
    Done,
    Error,
    Canceled,
}
names!(EntryStatus: Open => "open", InProgress => "in_progress", Done => "done", Error => "error", Canceled => "canceled");

impl EntryStatus {
    /// `done`, `error` and `canceled` end an entry: nothing changes it afterwards.
    pub fn is_final(self) -> bool {
        matches!(self, EntryStatus::Done | EntryStatus::Error | EntryStatus::Canceled)
    }
}

/// A document an entry is about: a path, or a path and a section (seed 004 §2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum TargetDoc {
    Path(String),
    Section {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        section: Option<String>,
        #[serde(flatten, skip_serializing_if = "is_empty_map")]
        extra: Extra,
    },
}

impl TargetDoc {
    pub fn path(&self) -> &str {
        match self {
            TargetDoc::Path(p) | TargetDoc::Section { path: p, .. } => p,
        }
    }

    /// The section named, if any.
    pub fn section(&self) -> Option<&str> {
        match self {
            TargetDoc::Path(_) => None,
            TargetDoc::Section { section, .. } => section.as_deref(),
        }
    }
}

/// A GitHub issue, comment or run an entry came from: a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SourceRef {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for SourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceRef::Number(n) => write!(f, "{n}"),
            SourceRef::Text(s) => f.write_str(s),
        }
    }
}

/// One blackboard entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Entry {
    /// Unique among all entries; also the file name.
    pub id: Id,
    /// The actor that wrote it.
    pub from: String,
    /// The actor it is addressed to.
    pub to: String,
    /// The project it belongs to; also its directory.
    pub project_id: Id,
    /// What is asked (`doc_update_proposal_request`, …); the lane's contract says
    /// which actor picks which kinds.
    pub kind: String,
    pub status: EntryStatus,
    /// The content; its shape is the kind's (`summary`, `details`, `refs` by convention).
    pub payload: Extra,
    pub target_docs: Vec<TargetDoc>,
    pub created_at: Timestamp,
    /// Moves on every change of status or payload.
    pub updated_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_issue: Option<SourceRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_comment_id: Option<SourceRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_run_id: Option<SourceRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// Longest actor name and kind: they name roles and lanes, not prose.
pub const MAX_NAME_LEN: usize = 128;

/// Why `value` cannot be an actor name or a kind, if it cannot.
pub fn name_problem(value: &str) -> Option<String> {
    if value.trim().is_empty() {
        Some("is empty".to_owned())
    } else if value.len() > MAX_NAME_LEN {
        Some(format!("is {} bytes long; at most {MAX_NAME_LEN}", value.len()))
    } else if value.chars().any(char::is_control) {
        Some(format!("{value:?} holds a control character"))
    } else {
        // A name is printed on terminals and on the review page: a direction
        // override would show it reversed, a zero-width one as another name.
        value
            .chars()
            .find(|c| invisible_format(*c))
            .map(|c| format!("{value:?} holds the invisible formatting character U+{:04X}", u32::from(c)))
    }
}

/// Zero-width characters and bidirectional controls.
fn invisible_format(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_what_it_shows() {
        assert_eq!(name_problem("Aya"), None);
        assert_eq!(name_problem("綾"), None);
        assert!(name_problem(" ").is_some_and(|p| p == "is empty"));
        assert!(name_problem("A\u{7}").is_some_and(|p| p.contains("control character")));
        // Shown reversed, or as another name.
        for hidden in ["A\u{202E}yaS", "A\u{200B}ya", "\u{2066}Aya\u{2069}"] {
            assert!(name_problem(hidden).is_some_and(|p| p.contains("invisible formatting character")), "{hidden:?}");
        }
    }
}
