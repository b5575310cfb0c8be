//! Deterministic merges of the files every daemon updates, so that two nodes'
//! versions of one of them become one version (the same bytes on every node)
//! instead of a conflict copy. Sync's pull calls [`merge`] when both sides changed
//! a file; which files it merges, and how, is decided here, where the formats live.

use std::collections::BTreeMap;

use crate::layout;

/// The files every daemon updates, each merged its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// `roles/memory-queue.json`: the union of entries by task and role; a
    /// `completed` entry beats a `pending` one.
    MemoryQueue,
    /// `shared/knowledge-sync.json`: each node's entry; of two versions of one
    /// node's entry, the one with the later times.
    KnowledgeSync,
    /// `gm/decisions.md`, `gm/arbitrations.md`: the union of their entries.
    EntryLog,
    /// `gm/pm-performance.json`: recomputed by every daemon from the same tree, so
    /// the two versions differ only by what each node had seen. Either is right;
    /// the greater is taken, deterministically.
    Recomputed,
    /// `reports/**.md`: as [`Shared::Recomputed`], but only when both versions are
    /// sealed as a daemon wrote them. A report edited by hand (its seal gone or
    /// broken) is no daemon's output: left to the usual rules, so the edit survives
    /// as the kept version or a conflict copy.
    Report,
}

impl Shared {
    /// Which merged file `path` (relative to the root) is, if any.
    pub fn of(path: &str) -> Option<Shared> {
        match path {
            layout::MEMORY_QUEUE => Some(Shared::MemoryQueue),
            layout::KNOWLEDGE_SYNC => Some(Shared::KnowledgeSync),
            layout::GM_DECISIONS | layout::GM_ARBITRATIONS => Some(Shared::EntryLog),
            layout::PM_PERFORMANCE => Some(Shared::Recomputed),
            _ if path.strip_prefix(layout::REPORTS).is_some_and(|p| p.starts_with('/')) && path.ends_with(".md") => {
                Some(Shared::Report)
            }
            _ => None,
        }
    }
}

/// Two versions of a [`Shared`] file as one, the same bytes whichever side is
/// `ours`; `None` when `path` is not one of them or a version cannot be merged
/// (unparsable, or not as a daemon writes it): the pull then keeps a conflict copy.
pub fn merge(path: &str, ours: &[u8], theirs: &[u8]) -> Option<Vec<u8>> {
    match Shared::of(path)? {
        Shared::MemoryQueue => merge_queue(ours, theirs),
        Shared::KnowledgeSync => merge_knowledge(ours, theirs),
        Shared::EntryLog => merge_entries(ours, theirs),
        Shared::Recomputed => Some(ours.max(theirs).to_vec()),
        Shared::Report => {
            use crate::formats::is_sealed;
            (is_sealed(ours) && is_sealed(theirs)).then(|| ours.max(theirs).to_vec())
        }
    }
}

fn merge_queue(ours: &[u8], theirs: &[u8]) -> Option<Vec<u8>> {
    use crate::formats::{MemoryQueue, QueueEntry, QueueStatus};
    let a: MemoryQueue = serde_json::from_slice(ours).ok()?;
    let b: MemoryQueue = serde_json::from_slice(theirs).ok()?;
    let mut by: BTreeMap<(String, String), QueueEntry> = BTreeMap::new();
    // A total order, so that merge(a, b) and merge(b, a) are the same bytes:
    // completed beats pending, then the greater serialized entry.
    let rank = |e: &QueueEntry| (e.status != QueueStatus::Pending, serde_json::to_string(e).unwrap_or_default());
    for e in a.queue.into_iter().chain(b.queue) {
        let key = (e.task_id.to_string(), e.role_id.to_string());
        if by.get(&key).is_none_or(|old| rank(&e) > rank(old)) {
            by.insert(key, e);
        }
    }
    let merged = MemoryQueue { queue: by.into_values().collect(), extra: merge_extra(a.extra, b.extra) };
    Some(crate::store::to_pretty_json(&merged).into_bytes())
}

/// An append-only Markdown log (`gm/decisions.md`, `gm/arbitrations.md`) whose two
/// versions share the text above their entries: that text, then the union of the
/// `## ` entries, sorted (each starts with its RFC 3339 time, so that is time order).
fn merge_entries(ours: &[u8], theirs: &[u8]) -> Option<Vec<u8>> {
    let split = |b: &[u8]| -> Option<(String, Vec<String>)> {
        let text = std::str::from_utf8(b).ok()?;
        let mut parts = text.split("\n## ");
        let header = parts.next().unwrap_or_default().trim_end().to_owned();
        Some((header, parts.map(|e| format!("## {}", e.trim_end())).collect()))
    };
    let (ha, ea) = split(ours)?;
    let (hb, eb) = split(theirs)?;
    // Different text above the entries is an edit, not an append: left to the
    // usual rules (a new node's default loses quietly, else a conflict copy).
    if ha != hb {
        return None;
    }
    let entries: std::collections::BTreeSet<String> = ea.into_iter().chain(eb).collect();
    let mut out = ha;
    out.push('\n');
    for e in entries {
        out.push('\n');
        out.push_str(&e);
        out.push('\n');
    }
    Some(out.into_bytes())
}

fn merge_knowledge(ours: &[u8], theirs: &[u8]) -> Option<Vec<u8>> {
    use crate::formats::{KnowledgeSync, NodeKnowledge};
    let a: KnowledgeSync = serde_json::from_slice(ours).ok()?;
    let b: KnowledgeSync = serde_json::from_slice(theirs).ok()?;
    // A total order: the latest of the entry's times, then the serialized entry.
    let rank = |e: &NodeKnowledge| {
        let latest = [&e.last_harvest_at, &e.last_archive_commit_at, &e.last_archive_push_at]
            .into_iter()
            .flatten()
            .map(|t| t.instant())
            .max();
        (latest, serde_json::to_string(e).unwrap_or_default())
    };
    let mut nodes = a.nodes;
    for (node, e) in b.nodes {
        if nodes.get(&node).is_none_or(|old| rank(&e) > rank(old)) {
            nodes.insert(node, e);
        }
    }
    let extra = merge_extra(a.extra, b.extra);
    Some(crate::store::to_pretty_json(&KnowledgeSync { nodes, extra }).into_bytes())
}

/// Fields clawboard does not know, from both sides; of two values for one key, the
/// greater serialized one (a total order: the same either way).
fn merge_extra(mut a: crate::formats::Extra, b: crate::formats::Extra) -> crate::formats::Extra {
    for (k, v) in b {
        if a.get(&k).is_none_or(|old| serde_json::to_string(&v).ok() > serde_json::to_string(old).ok()) {
            a.insert(k, v);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_merged_files_are_known_by_their_layout_paths() {
        assert_eq!(Shared::of("roles/memory-queue.json"), Some(Shared::MemoryQueue));
        assert_eq!(Shared::of("shared/knowledge-sync.json"), Some(Shared::KnowledgeSync));
        assert_eq!(Shared::of("gm/decisions.md"), Some(Shared::EntryLog));
        assert_eq!(Shared::of("gm/arbitrations.md"), Some(Shared::EntryLog));
        assert_eq!(Shared::of("gm/pm-performance.json"), Some(Shared::Recomputed));
        assert_eq!(Shared::of("reports/weekly/2026-W47.md"), Some(Shared::Report));
        for other in ["reports.md", "reportsx/a.md", "reports/a.json", "tasks/t/roles/memory-queue.json", "gm/notes.md"]
        {
            assert_eq!(Shared::of(other), None, "{other}");
        }
    }

    #[test]
    fn memory_queues_merge_by_task_and_role() {
        let q = |entries: &[(&str, &str, &str)]| {
            let queue: Vec<serde_json::Value> = entries
                .iter()
                .map(|(t, r, s)| {
                    serde_json::json!({"taskId": t, "roleId": r, "status": s, "enqueuedAt": "2026-11-22T00:00:00Z"})
                })
                .collect();
            serde_json::to_vec(&serde_json::json!({ "queue": queue })).unwrap()
        };
        let ours = q(&[("t1", "w", "pending"), ("t2", "w", "completed")]);
        let theirs = q(&[("t1", "w", "completed"), ("t3", "pm", "pending")]);
        let merged = merge("roles/memory-queue.json", &ours, &theirs).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&merged).unwrap();
        let got: Vec<(String, String)> = v["queue"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["taskId"].as_str().unwrap().to_owned(), e["status"].as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            got,
            vec![("t1".into(), "completed".into()), ("t2".into(), "completed".into()), ("t3".into(), "pending".into())]
        );
        assert_eq!(merge("roles/memory-queue.json", &theirs, &ours), Some(merged), "the same either way");
        assert_eq!(merge("gm/notes.md", &ours, &theirs), None, "other files are not merged");
        assert_eq!(merge("roles/memory-queue.json", b"{", &theirs), None, "unparsable: a conflict copy");
    }

    #[test]
    fn gm_logs_merge_as_the_union_of_their_entries_and_recomputed_files_pick_one() {
        let head = "# GM decisions\n\nOne entry per decision, newest last.\n";
        let e1 = "\n## 2026-11-21T10:00:00Z — escalation a approved\n\n- by: human\n";
        let e2 = "\n## 2026-11-21T11:00:00Z — escalation b rejected\n\n- by: human\n- note: no\n";
        let e3 = "\n## 2026-11-21T12:00:00Z — escalation c approved\n\n- by: human (web)\n";
        let ours = format!("{head}{e1}{e2}");
        let theirs = format!("{head}{e1}{e3}");
        let merged = merge("gm/decisions.md", ours.as_bytes(), theirs.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(merged.clone()).unwrap(), format!("{head}{e1}{e2}{e3}"));
        assert_eq!(merge("gm/decisions.md", theirs.as_bytes(), ours.as_bytes()), Some(merged));
        let same = merge("gm/arbitrations.md", ours.as_bytes(), ours.as_bytes()).unwrap();
        assert_eq!(same, ours.as_bytes(), "merging a file with itself changes nothing");
        let (a, b) = (b"{\"pms\":{}}".as_slice(), b"{\"pms\":{\"pm\":1}}".as_slice());
        assert_eq!(merge("gm/pm-performance.json", a, b), merge("gm/pm-performance.json", b, a));
        let (x, y) = (crate::formats::seal("x"), crate::formats::seal("y"));
        let report = "reports/daily/2026-11-21.md";
        let greater = x.as_bytes().max(y.as_bytes()).to_vec();
        assert_eq!(merge(report, x.as_bytes(), y.as_bytes()), Some(greater.clone()));
        assert_eq!(merge(report, y.as_bytes(), x.as_bytes()), Some(greater));
        // Edited by hand on one side (or written before seals): no silent pick.
        let by_hand = x.replace('x', "x, and a note by hand");
        assert_eq!(merge(report, by_hand.as_bytes(), y.as_bytes()), None);
        assert_eq!(merge(report, y.as_bytes(), b"y"), None);
        let edited = format!("# GM decisions\n\n- a decision written by hand\n{e1}");
        assert_eq!(merge("gm/decisions.md", ours.as_bytes(), edited.as_bytes()), None, "not an append");
    }

    #[test]
    fn knowledge_sync_merges_by_node_keeping_the_later_entry() {
        let k = |entries: &[(&str, &str)]| {
            let nodes: serde_json::Map<String, serde_json::Value> = entries
                .iter()
                .map(|(n, at)| {
                    ((*n).to_owned(), serde_json::json!({"lastArchiveCommit": at, "lastArchiveCommitAt": at}))
                })
                .collect();
            serde_json::to_vec(&serde_json::json!({ "nodes": nodes })).unwrap()
        };
        let ours = k(&[("a", "2026-11-22T01:00:00Z"), ("b", "2026-11-22T05:00:00Z")]);
        let theirs = k(&[("b", "2026-11-22T03:00:00Z"), ("c", "2026-11-22T02:00:00Z")]);
        let merged = merge("shared/knowledge-sync.json", &ours, &theirs).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&merged).unwrap();
        let got: Vec<(&str, &str)> = v["nodes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(n, e)| (n.as_str(), e["lastArchiveCommitAt"].as_str().unwrap()))
            .collect();
        assert_eq!(got, [("a", "2026-11-22T01:00:00Z"), ("b", "2026-11-22T05:00:00Z"), ("c", "2026-11-22T02:00:00Z")]);
        assert_eq!(merge("shared/knowledge-sync.json", &theirs, &ours), Some(merged), "the same either way");
    }
}
