//! `clawboard entry`: a Doc Update lap by hand through the CLI (new, list, status,
//! cancel, render, parse), and every refusal naming what is wrong and changing nothing.

use clawboard_tests::{Tree, repo};

const SEED_ENTRY: &str = "tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json";

fn new_entry(t: &Tree, from: &str, to: &str, kind: &str) -> String {
    let r = t.run(&[
        "--json",
        "entry",
        "new",
        "--project",
        "vpm-mini",
        "--from",
        from,
        "--to",
        to,
        "--kind",
        kind,
        "--summary",
        "reflect phase 2",
        "--refs",
        r#"{"issue": 571}"#,
        "--target-doc",
        "STATE/current_state.md",
        "--source",
        "issue571",
    ]);
    r.ok();
    r.json()["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_doc_update_lap_by_hand() {
    let t = Tree::init();
    let first = new_entry(&t, "Human", "Aya", "doc_update_proposal_request");
    assert_eq!(first, "vpm-mini-issue571-1");
    let file = t.root.join("entries/vpm-mini/vpm-mini-issue571-1.json");
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written["status"], "open");
    assert_eq!(written["payload"]["refs"]["issue"], 571);
    assert_eq!(written["target_docs"][0], "STATE/current_state.md");

    t.run(&["entry", "status", &first, "in_progress", "--as", "Aya"]).ok();
    let second = new_entry(&t, "Aya", "Sho", "doc_update_review_request");
    assert_eq!(second, "vpm-mini-issue571-2");
    t.run(&["entry", "status", &first, "done", "--as", "Aya", "--note", "proposal written"]).ok();

    let open = t.run(&["--json", "entry", "list", "--status", "open"]);
    open.ok();
    let open = open.json();
    let ids: Vec<&str> = open.as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [second.as_str()]);
    let table = t.run(&["entry", "list", "--project", "vpm-mini"]);
    table.ok();
    assert!(
        table.stdout.contains("ID") && table.stdout.contains("done") && table.stdout.contains("Sho"),
        "{}",
        table.stdout
    );
    assert!(t.run(&["entry", "list", "--to", "Gen"]).stdout.contains("No entries."));

    let shown = t.run(&["entry", "show", &first]);
    shown.ok();
    assert_eq!(shown.json()["note"], "proposal written");
    assert_eq!(shown.json()["status"], "done");

    t.run(&["entry", "cancel", &second]).ok(); // Human may
    assert_eq!(t.run(&["entry", "show", &second]).json()["status"], "canceled");
}

#[test]
fn render_prints_the_seeds_form_and_parse_reads_it_back() {
    let t = Tree::init();
    let seed = std::fs::read_to_string(repo().join(SEED_ENTRY)).unwrap();
    let added = t.run(&["entry", "new", "--file", SEED_ENTRY]);
    added.ok();
    let rendered = t.run(&["entry", "render", "vpm-mini-docupdate-issue571-1"]);
    rendered.ok();
    assert_eq!(rendered.stdout, format!("<!-- blackboard:doc_update_v1 -->\n\njson\n{seed}"));
    let other = t.run(&["entry", "render", "vpm-mini-docupdate-issue571-1", "--marker", "blackboard:release_v1"]);
    assert!(other.stdout.starts_with("<!-- blackboard:release_v1 -->\n\njson\n{"));

    // Read back from standard input, into a fresh tree.
    let t2 = Tree::init();
    let parsed = t2.run_with_stdin(&["entry", "parse", "-", "--add"], rendered.stdout.as_bytes());
    parsed.ok();
    assert_eq!(parsed.stdout, seed);
    assert_eq!(
        std::fs::read_to_string(t2.root.join("entries/vpm-mini/vpm-mini-docupdate-issue571-1.json")).unwrap(),
        seed
    );
    // As people paste it: a fenced block.
    let pasted = format!("<!-- blackboard:doc_update_v1 -->\n\n```json\n{seed}```\n");
    let file = t.scratch("pasted.md", pasted.as_bytes());
    let r = t.run(&["entry", "parse", file.to_str().unwrap()]);
    r.ok();
    assert_eq!(r.stdout, seed);
}

/// An entry file for `entry new --file`: id `e1`, `status` and `payload` as given.
fn entry_text(status: &str, payload: &str) -> String {
    format!(
        r#"{{"id":"e1","from":"Human","to":"Aya","project_id":"p","kind":"k","status":"{status}","payload":{payload},"target_docs":[],"created_at":"2025-11-30T02:30:00+09:00","updated_at":"2025-11-30T02:30:00+09:00"}}"#
    )
}

#[test]
fn refusals_name_the_entry_field_or_rule_and_change_nothing() {
    let t = Tree::init();
    let id = new_entry(&t, "Human", "Aya", "doc_update_proposal_request");
    let before = t.snapshot();
    let refused = |args: &[&str], says: &[&str]| {
        let r = t.run(args);
        r.expect_code(2);
        for s in says {
            assert!(r.stderr.contains(s), "{args:?}: {s:?} not in\n{}", r.stderr);
        }
    };
    refused(&["entry", "status", &id, "in_progress", "--as", "Tsugu"], &[&id, "\"Tsugu\" may not change its status"]);
    refused(&["entry", "status", &id, "open", "--as", "Aya"], &["open -> open", "already open"]);
    refused(&["entry", "status", &id, "closed"], &["closed"]);
    refused(&["entry", "show", "nope"], &["no entry nope"]);
    refused(&["entry", "show", "../../etc/passwd"], &["entry field id"]);
    refused(
        &["entry", "new", "--project", "../x", "--from", "Human", "--to", "Aya", "--kind", "k"],
        &["entry field project_id"],
    );
    refused(
        &["entry", "new", "--project", "p", "--from", "Human", "--to", "Aya", "--kind", "k", "--details", "[1]"],
        &["--details: must be a JSON object"],
    );
    refused(
        &["entry", "new", "--project", "p", "--from", "Human", "--to", "Aya", "--kind", "k", "--task", "../t1"],
        &["entry field task", "\"../t1\""],
    );
    refused(
        &["entry", "new", "--project", "p", "--from", "", "--to", "Aya", "--kind", "k", "--id", "x1"],
        &["/from", "is empty"],
    );
    let dup = t.scratch("dup.json", &std::fs::read(t.root.join(format!("entries/vpm-mini/{id}.json"))).unwrap());
    refused(&["entry", "new", "--file", dup.to_str().unwrap()], &["is taken"]);
    let big = format!(
        r#"{{"id":"big","from":"Human","to":"Aya","project_id":"p","kind":"k","status":"open","payload":{{"blob":"{}"}},"target_docs":[],"created_at":"2025-11-30T02:30:00+09:00","updated_at":"2025-11-30T02:30:00+09:00"}}"#,
        "x".repeat(10 * 1024 * 1024)
    );
    let big = t.scratch("big.json", big.as_bytes());
    refused(&["entry", "new", "--file", big.to_str().unwrap()], &["entry big", "at most 65000 bytes"]);
    let done = t.scratch("done.json", entry_text("done", "{}").as_bytes());
    refused(&["entry", "new", "--file", done.to_str().unwrap()], &["done.json: /status", "a new entry starts open"]);
    let twice = t.scratch("twice.json", entry_text("open", r#"{"summary":"a","summary":"b"}"#).as_bytes());
    refused(
        &["entry", "new", "--file", twice.to_str().unwrap()],
        &["twice.json", "/payload", "the key \"summary\" appears twice"],
    );
    refused(
        &[
            "entry",
            "new",
            "--project",
            "p",
            "--from",
            "Human",
            "--to",
            "Aya",
            "--kind",
            "k",
            "--details",
            r#"{"a":1,"a":2}"#,
        ],
        &["--details", "the key \"a\" appears twice"],
    );
    let broken = t.scratch("broken.md", b"<!-- blackboard:doc_update_v1 -->\n\njson\n{\"id\": 'x'}");
    refused(&["entry", "parse", broken.to_str().unwrap(), "--add"], &["broken.md", "rule 3", "double quotes only"]);
    refused(&["entry", "render", &id, "--marker", "evil -->"], &["--marker"]);
    assert_eq!(t.snapshot(), before, "a refusal changed the tree");
}

/// Writers at once: each id picked is moved on when another took it first, and
/// one id given in two projects at once is created once.
#[test]
fn entries_written_at_once_get_ids_of_their_own() {
    let t = Tree::init();
    // `clawboard entry new` for Human to Aya in `project`, plus `more`, all started at once.
    let at_once = |projects: &[&str], more: &[&str]| -> Vec<std::process::Output> {
        let children: Vec<_> = projects
            .iter()
            .map(|project| {
                let mut args = vec!["--json", "entry", "new", "--project", project, "--from", "Human", "--to", "Aya"];
                args.extend_from_slice(&["--kind", "k"]);
                args.extend_from_slice(more);
                t.command(&args)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
    };
    let mut ids = std::collections::BTreeSet::new();
    for out in at_once(&["p"; 12], &["--source", "c"]) {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        ids.insert(v["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 12, "{ids:?}");

    let made =
        at_once(&["q", "r", "q", "r", "q", "r"], &["--id", "dup4"]).iter().filter(|o| o.status.success()).count();
    assert_eq!(made, 1, "one id, one entry");
    let found: Vec<_> = ["q", "r"].iter().filter(|p| t.root.join(format!("entries/{p}/dup4.json")).exists()).collect();
    assert_eq!(found.len(), 1, "{found:?}");
}
