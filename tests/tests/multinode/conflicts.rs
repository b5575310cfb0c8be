//! The same file changed on two nodes: one winner, one conflict copy everywhere, the
//! loser escalating; copies capped; a hand edit kept over a regeneration; identical
//! files of fresh nodes sharing one history.

use std::time::Duration;

use clawboard_tests::Tree;
use clawboard_tests::s3::Kind;
use rstest::rstest;

use super::{by_hand, exchange, on, push_both_and_pull_everywhere, sync, tree_hashes};

/// Reports are the daemons' own output, merged by taking the greater version; a
/// report edited by hand is not, and its edit must survive another node's regeneration.
#[test]
fn a_report_edited_by_hand_survives_another_nodes_regeneration() {
    let (_scratch, _bucket, c) = on(Kind::Dir);
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    let report = |t: &Tree| {
        let cfg = t.dir.path().join("clawboard.toml");
        t.run(&["--config", cfg.to_str().unwrap(), "report", "daily", "--date", "2026-11-20"]).ok();
    };
    let rel = "reports/daily/2026-11-20.md";
    report(a);
    sync(a, &["push"]).ok();
    for n in &c.nodes {
        sync(&n.t, &["pull"]).ok();
    }
    let note = "A note by hand: Friday's dip was the outage.";
    let edited = format!("{}\n{note}\n", std::fs::read_to_string(a.root.join(rel)).unwrap());
    std::fs::write(a.root.join(rel), &edited).unwrap();
    // Regenerated a second later on b: its "Generated at" is greater than a's, so
    // taking the greater version would drop the note.
    std::thread::sleep(Duration::from_millis(1100));
    report(b);
    push_both_and_pull_everywhere(&c, a, b);
    c.converge(1, "after the report conflict");
    for n in &c.nodes {
        let dir = n.t.root.join("reports/daily");
        let versions: Vec<String> =
            std::fs::read_dir(&dir).unwrap().flatten().map(|e| std::fs::read_to_string(e.path()).unwrap()).collect();
        assert_eq!(versions.len(), 2, "{}: the report and one conflict copy", n.id);
        assert_eq!(versions.iter().filter(|v| v.contains(note)).count(), 1, "{}: the edit is kept", n.id);
    }
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::s3s(Kind::S3s)]
fn the_same_file_edited_on_two_nodes_keeps_one_winner_and_one_copy_everywhere(#[case] kind: Kind) {
    let (_scratch, _bucket, c) = on(kind);
    // Between syncs: no daemon, every step by hand.
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    std::fs::write(a.root.join("gm/notes.md"), "common\n").unwrap();
    sync(a, &["push"]).ok();
    for n in &c.nodes {
        sync(&n.t, &["pull"]).ok();
    }
    assert_eq!(std::fs::read_to_string(c.node("node-c").t.root.join("gm/notes.md")).unwrap(), "common\n");
    std::fs::write(a.root.join("gm/notes.md"), "edited on a\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(b.root.join("gm/notes.md"), "edited on b, later\n").unwrap();
    push_both_and_pull_everywhere(&c, a, b);
    c.converge(1, "after the conflict");
    for n in &c.nodes {
        let root = &n.t.root;
        assert_eq!(
            std::fs::read_to_string(root.join("gm/notes.md")).unwrap(),
            "edited on b, later\n",
            "{}: the later edit wins",
            n.id
        );
        let copies: Vec<String> = std::fs::read_dir(root.join("gm"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.starts_with("notes.conflict-"))
            .collect();
        assert_eq!(copies.len(), 1, "{}: one conflict copy: {copies:?}", n.id);
        assert!(copies[0].starts_with("notes.conflict-node-a-") && copies[0].ends_with(".md"), "{copies:?}");
        assert_eq!(std::fs::read_to_string(root.join("gm").join(&copies[0])).unwrap(), "edited on a\n");
    }
    // Node-a's version lost: node-a raised one `normal` escalation, synced everywhere.
    let escalations: Vec<serde_json::Value> = std::fs::read_dir(c.node("node-c").t.root.join("escalations"))
        .unwrap()
        .flatten()
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    assert_eq!(escalations.len(), 1, "{escalations:?}");
    assert_eq!(escalations[0]["level"], "normal");
    assert!(escalations[0]["issue"].as_str().unwrap().contains("gm/notes.md"), "{}", escalations[0]);
    // … and one arbitration entry linking both versions, synced everywhere too.
    for n in &c.nodes {
        let log = std::fs::read_to_string(n.t.root.join("gm/arbitrations.md")).unwrap();
        assert_eq!(log.matches("sync conflict on gm/notes.md").count(), 1, "{}: {log}", n.id);
        assert!(log.contains("- kept: [gm/notes.md](../gm/notes.md) (the version from node-b)"), "{log}");
        assert!(log.contains("- copy: [gm/notes.conflict-node-a-"), "{log}");
    }
    let cfg = a.dir.path().join("clawboard.toml");
    let status = a.run(&["--config", cfg.to_str().unwrap(), "status", "--json"]).json();
    assert_eq!(status["conflicts"].as_array().unwrap().len(), 1, "{status}");
    // A delete against a modify keeps the modified file.
    std::fs::remove_file(a.root.join("gm/notes.md")).unwrap();
    std::fs::write(b.root.join("gm/notes.md"), "modified again on b\n").unwrap();
    sync(a, &["push"]).ok();
    sync(b, &["push"]).ok();
    exchange(&c.trees(), 2);
    for n in &c.nodes {
        sync(&n.t, &["pull"]).ok();
    }
    c.converge(1, "after delete against modify");
    assert_eq!(std::fs::read_to_string(a.root.join("gm/notes.md")).unwrap(), "modified again on b\n");
}

#[test]
fn conflict_copies_are_capped_per_file() {
    let (_scratch, _bucket, c) = by_hand();
    // A cap of 3 for this test.
    for n in &c.nodes {
        let cfg = n.t.dir.path().join("clawboard.toml");
        let text =
            std::fs::read_to_string(&cfg).unwrap().replace("lease = \"4s\"", "lease = \"4s\"\nmax_conflict_copies = 3");
        std::fs::write(cfg, text).unwrap();
    }
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    for round in 0..5 {
        std::fs::write(a.root.join("gm/hot.md"), format!("a{round}\n")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        std::fs::write(b.root.join("gm/hot.md"), format!("b{round}\n")).unwrap();
        sync(a, &["push"]).ok();
        sync(b, &["push"]).ok();
        exchange(&[a, b], 2);
    }
    for n in [a, b] {
        let copies = std::fs::read_dir(n.root.join("gm"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("hot.conflict-"))
            .count();
        assert_eq!(copies, 3, "at most 3 copies kept");
        assert_eq!(std::fs::read_to_string(n.root.join("gm/hot.md")).unwrap(), "b4\n");
    }
    assert_eq!(tree_hashes(&a.root), tree_hashes(&b.root));
}

/// Two fresh trees push the same initial files: the second finds them in the
/// bucket and takes their version as its own record (no upload of its own), so
/// the first edit afterwards reaches it as a plain change, not a conflict.
#[test]
fn fresh_nodes_share_one_history_of_their_identical_files() {
    let (_s, _bucket, c) = by_hand();
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    let first = sync(a, &["push", "--json"]).ok().json();
    assert!(first["uploaded"].as_u64().is_some_and(|n| n >= 4), "{first}");
    let second = sync(b, &["push", "--json"]).ok().json();
    assert_eq!(second["uploaded"], 0, "node-b sent nothing: the bucket had the same bytes: {second}");
    sync(a, &["pull"]).ok();
    sync(b, &["pull"]).ok();
    let path = "gm/arbitrations.md";
    let mut text = std::fs::read_to_string(a.root.join(path)).unwrap();
    text.push_str("an entry of node-a's\n");
    std::fs::write(a.root.join(path), &text).unwrap();
    sync(a, &["push"]).ok();
    let pulled = sync(b, &["pull", "--json"]).ok().json();
    assert!(pulled.get("conflicts").is_none_or(|c| c.as_array().unwrap().is_empty()), "{pulled}");
    assert_eq!(std::fs::read_to_string(b.root.join(path)).unwrap(), text);
    let copies: Vec<_> = std::fs::read_dir(b.root.join("gm"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".conflict-"))
        .collect();
    assert!(copies.is_empty(), "no conflict copy: {copies:?}");
}

/// The node that finds a conflict may be the winner; the loser, which then takes
/// the winner quietly, learns of it from the copy of its version and raises the
/// one escalation and arbitration entry.
#[test]
fn a_conflict_found_by_the_winner_is_escalated_by_the_loser() {
    let (_s, _bucket, c) = by_hand();
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    std::fs::write(a.root.join("gm/notes.md"), "v1\n").unwrap();
    sync(a, &["push"]).ok();
    sync(b, &["pull"]).ok();
    std::fs::write(a.root.join("gm/notes.md"), "v1\nA edit\n").unwrap();
    sync(a, &["push"]).ok();
    // Node-b edits before it pulls: it finds the conflict, and its later edit wins.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(b.root.join("gm/notes.md"), "v1\nB edit\n").unwrap();
    let found = sync(b, &["pull", "--json"]).ok().json();
    assert_eq!(found["conflicts"][0]["winner"], "node-b", "{found}");
    let told = sync(a, &["pull", "--json"]).ok().json();
    assert_eq!(told["conflicts"].as_array().unwrap().len(), 1, "node-a is told: {told}");
    assert_eq!(told["conflicts"][0]["path"], "gm/notes.md", "{told}");
    assert_eq!(told["conflicts"][0]["loser"], "node-a", "{told}");
    assert_eq!(std::fs::read_to_string(a.root.join("gm/notes.md")).unwrap(), "v1\nB edit\n");
    exchange(&c.trees(), 2);
    c.converge(1, "after the conflict");
    for n in &c.nodes {
        let escalations: Vec<serde_json::Value> = std::fs::read_dir(n.t.root.join("escalations"))
            .unwrap()
            .flatten()
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect();
        assert_eq!(escalations.len(), 1, "{}: {escalations:?}", n.id);
        assert!(escalations[0]["issue"].as_str().unwrap().contains("gm/notes.md"), "{}", escalations[0]);
        let log = std::fs::read_to_string(n.t.root.join("gm/arbitrations.md")).unwrap();
        assert_eq!(log.matches("sync conflict on gm/notes.md").count(), 1, "{}: {log}", n.id);
    }
    // Pulled again, nothing is raised twice.
    sync(a, &["pull"]).ok();
    assert_eq!(std::fs::read_dir(a.root.join("escalations")).unwrap().count(), 1);
}
