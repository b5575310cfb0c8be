//! The seed's own examples (004 §2.2, §4.1, kept in `tests/fixtures/seed-tree/entries/`):
//! entries and their comment form read and write back byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use clawboard_core::store::to_pretty_json;
use clawboard_entries::{DEFAULT_MARKER, Entry, EntryStatus, SourceRef, TargetDoc, parse, render};

/// The seed's Doc Update request from Human to Aya, in the seed's field order.
const PROPOSAL_REQUEST: &str =
    include_str!("../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json");

/// Tsugu's apply entry, done, with sections and a run id.
const APPLY_DONE: &str =
    include_str!("../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-apply-run19793359086.json");

fn entry(text: &str) -> Entry {
    clawboard_core::validate::parse("example", text.as_bytes(), &Default::default()).unwrap()
}

#[test]
fn the_seeds_entries_read_and_write_back_byte_for_byte() {
    for text in [PROPOSAL_REQUEST, APPLY_DONE] {
        assert_eq!(to_pretty_json(&entry(text)), text);
    }
    let e = entry(APPLY_DONE);
    assert_eq!(e.status, EntryStatus::Done);
    assert_eq!(e.source_issue, Some(SourceRef::Text("571".into())));
    assert_eq!(e.source_run_id, Some(SourceRef::Number(19793359086)));
    assert!(matches!(&e.target_docs[0], TargetDoc::Section { section: Some(s), .. } if s == "## 差分（δ）"));
}

#[test]
fn unknown_fields_are_kept_in_place_at_the_end() {
    let text =
        PROPOSAL_REQUEST.replace("\"source_issue\": 571\n", "\"source_issue\": 571,\n  \"lane\": \"doc_update\"\n");
    assert_eq!(to_pretty_json(&entry(&text)), text);
}

#[test]
fn the_seeds_comment_form_round_trips() {
    let comment = format!("<!-- blackboard:doc_update_v1 -->\n\njson\n{PROPOSAL_REQUEST}");
    let parsed = parse(&comment).unwrap();
    assert_eq!(parsed.marker, DEFAULT_MARKER);
    assert_eq!(parsed.entry, entry(PROPOSAL_REQUEST));
    assert_eq!(render(&parsed.entry, &parsed.marker), comment);
    // Line by line as §4.1 lays it out.
    let lines: Vec<&str> = comment.lines().collect();
    assert_eq!(&lines[..4], ["<!-- blackboard:doc_update_v1 -->", "", "json", "{"]);
    assert!(!comment.contains('\''), "double quotes only");
}
