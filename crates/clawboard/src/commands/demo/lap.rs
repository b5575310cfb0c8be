//! The demo's Doc Update lap (seed 004): Human asks Aya for a change to a
//! project document; Aya proposes it, Sho reviews it, Tsugu applies it, Gen
//! reports back to Human, each a role the daemon runs for the entry addressed to
//! it (scripts/roles/doc_update.py).

use std::collections::BTreeMap;

use anyhow::Context;
use clawboard_core::Store;
use clawboard_core::formats::Extra;
use clawboard_entries::{self as entries, Entry, EntryStatus, Filter, TargetDoc};

pub const PROJECT: &str = "vpm-mini";
pub const DOC: &str = "STATE/current_state.md";
const SECTION: &str = "## 差分（δ）";

/// The lane's part of the demo config: `config/examples/doc-update.toml`, its
/// roles run as `script` (the demo's copy of scripts/roles/doc_update.py).
pub fn config(script: &str) -> String {
    include_str!("../../../../../config/examples/doc-update.toml")
        .replace(r#"["python3", "scripts/roles/doc_update.py"]"#, script)
}

/// Writes the project document and Human's request to Aya; returns the request's id.
pub fn start(store: &Store, issue: u64) -> anyhow::Result<String> {
    let doc = store.root().join("projects").join(PROJECT).join(DOC);
    if let Some(dir) = doc.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&doc, format!("# vpm-mini: current state\n\n{SECTION}\n- Phase 1 done\n"))
        .with_context(|| format!("writing {}", doc.display()))?;
    let now = clawboard_core::Timestamp::now();
    let mut payload = Extra::new();
    payload.insert("summary".into(), "Phase 2 done".into());
    payload.insert("details".into(), serde_json::json!({"reason": "the demo's lap"}));
    payload.insert("refs".into(), serde_json::json!({"issue": issue}));
    let entry = Entry {
        id: entries::new_id(store, PROJECT, &format!("docupdate-issue{issue}"))?,
        from: entries::HUMAN.into(),
        to: "Aya".into(),
        project_id: clawboard_core::Id::new(PROJECT)?,
        kind: "doc_update_proposal_request".into(),
        status: EntryStatus::Open,
        payload,
        target_docs: vec![TargetDoc::Section { path: DOC.into(), section: Some(SECTION.into()), extra: Extra::new() }],
        created_at: now.clone(),
        updated_at: now,
        source_issue: Some(entries::SourceRef::Number(issue)),
        source_comment_id: None,
        source_run_id: None,
        note: None,
        extra: Extra::new(),
    };
    entries::create(store, &entry)?;
    Ok(entry.id.to_string())
}

/// The lap's entries as they are now, each change printed once by `say`; true
/// once Gen's report reached Human.
pub fn follow(store: &Store, seen: &mut BTreeMap<String, EntryStatus>, say: &dyn Fn(&str)) -> bool {
    let filter = Filter { project: Some(PROJECT.into()), ..Filter::default() };
    let Ok((list, _)) = entries::list(store, &filter) else { return false };
    for e in &list {
        if seen.get(e.id.as_str()) != Some(&e.status) {
            let summary = e.payload.get("summary").and_then(|s| s.as_str()).unwrap_or_default();
            say(&format!("entry {:<34} {:>5} -> {:<5} {:<11} {summary}", e.id, e.from, e.to, e.status.as_str()));
            seen.insert(e.id.to_string(), e.status);
        }
    }
    list.iter().any(|e| e.to == entries::HUMAN && e.kind == "doc_update_report")
}

/// What the lap left, for the demo's closing list; true if the report reached Human.
pub fn summary(store: &Store, root: &std::path::Path) -> anyhow::Result<bool> {
    let (list, _) = entries::list(store, &Filter { project: Some(PROJECT.into()), ..Filter::default() })?;
    let report = list.iter().find(|e| e.to == entries::HUMAN && e.kind == "doc_update_report");
    outln!("  entries/{PROJECT}/  {} entries of the Doc Update lap (clawboard entry list)", list.len())?;
    let doc = std::fs::read_to_string(root.join("projects").join(PROJECT).join(DOC)).unwrap_or_default();
    outln!("  projects/{PROJECT}/{DOC}  as Tsugu left it:")?;
    for line in doc.lines() {
        outln!("      {line}")?;
    }
    if let Some(r) = report {
        outln!(
            "  entries/{PROJECT}/{}.json  Gen's report to Human, {}: close it with\n      clawboard --root {} entry status {} done",
            r.id,
            r.status,
            root.display(),
            r.id
        )?;
    }
    Ok(report.is_some())
}
