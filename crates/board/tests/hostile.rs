#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Hostile scopes, paths and values: each gets a clear error that names the task
//! and the path, and changes nothing on disk (board.json and the history).

mod common;

use clawboard_board::{BoardPath, Caller, Error, Op, Scope, TaskBoard};
use clawboard_core::Store;
use serde_json::{Value, json};

use common::{acl, board_json_path, history_listing, store, tree};

const TASK: &str = "t-hostile-7";

/// A board with something on it, so board.json and the history exist.
fn seeded() -> (tempfile::TempDir, Store, TaskBoard) {
    let (dir, store) = store();
    let board = TaskBoard::new(&store, TASK).unwrap();
    let (acl, d) = (acl(), Caller::daemon());
    board.write_meta(&acl, &d, "intent", json!("写一篇关于AI的小红书")).unwrap();
    board.write_meta(&acl, &d, "platform", json!("xiaohongshu")).unwrap();
    board.write_content(&acl, &d, "hook", "selected", json!("5个AI工具让你效率翻倍")).unwrap();
    (dir, store, board)
}

/// What is on disk for the task: every file's bytes, board.json's bytes and the
/// history directory's listing.
#[derive(Debug, PartialEq)]
struct Disk {
    files: std::collections::BTreeMap<String, Option<Vec<u8>>>,
    board: Vec<u8>,
    history: Vec<String>,
}

fn disk(store: &Store, board: &TaskBoard) -> Disk {
    Disk {
        files: tree(store, TASK),
        board: std::fs::read(board_json_path(store, board)).unwrap(),
        history: history_listing(store, TASK),
    }
}

/// `result` is an error of the board that names the task, `path` and `why`; and the
/// disk is as it was.
fn refused<T: std::fmt::Debug>(
    store: &Store,
    board: &TaskBoard,
    before: &Disk,
    what: &str,
    result: clawboard_board::Result<T>,
    path: &str,
    why: &str,
) {
    let e = match result {
        Ok(v) => panic!("{what}: accepted: {v:?}"),
        Err(e) => e,
    };
    assert!(matches!(e, Error::Bad { .. } | Error::Refused { .. }), "{what}: {e:?}");
    assert!(e.is_bad_input(), "{what}: the caller's fault, not the board's");
    let msg = e.to_string();
    let short = |s: &str| s.chars().take(200).collect::<String>();
    assert!(msg.contains(&format!("task {TASK}")), "{what}: the task is not named: {}", short(&msg));
    assert!(msg.contains(path), "{what}: the path {} is not named: {}", short(path), short(&msg));
    assert!(msg.contains(why), "{what}: {why:?} is not said: {}", short(&msg));
    assert_eq!(&disk(store, board), before, "{what}: the disk changed");
}

fn nested(levels: usize, in_array: bool) -> Value {
    let mut v = json!("bottom");
    for _ in 0..levels {
        v = if in_array { json!([v]) } else { json!({"a": v}) };
    }
    v
}

#[test]
fn hostile_paths_are_refused_naming_the_task_and_path() {
    let (_dir, store, board) = seeded();
    let before = disk(&store, &board);
    let (acl, d) = (acl(), Caller::daemon());
    let long = format!("meta{}", ".a".repeat(10_000));
    // (the path, what the reason says)
    let paths: Vec<(String, &str)> = vec![
        ("meta..x".into(), "position 5: an empty key"),
        ("../".into(), "not a zone"),
        ("content/../../etc".into(), "not a zone"),
        ("content.../x".into(), "empty key"),
        ("meta.hook/../../etc".into(), "'/' is not allowed"),
        (long.clone(), "at most 32 keys"),
        (format!("meta{}", ".a".repeat(33)), "more than 32 keys"),
        ("meta.in\u{1b}tent".into(), "not allowed"),
        ("meta.x\u{0}".into(), "not allowed"),
        ("meta.x\ny".into(), "not allowed"),
        ("*".into(), "not a zone"),
        ("meta.*".into(), "not allowed"),
        ("".into(), "empty"),
        ("secrets.key".into(), "not a zone"),
        (format!("meta.{}", "k".repeat(65)), "longer than 64 bytes"),
    ];
    for (p, why) in &paths {
        let what = format!("path {:?}", p.chars().take(40).collect::<String>());
        // Parsed for a read or a write: refused before anything is touched.
        refused(&store, &board, &before, &what, board.parse(p), p, why);
        refused(&store, &board, &before, &what, board.parse(p).and_then(|bp| board.read(&acl, &d, &bp)), p, why);
        refused(
            &store,
            &board,
            &before,
            &what,
            board.parse(p).and_then(|bp| {
                let op =
                    Op::set(bp, json!("x")).map_err(|(path, reason)| Error::Bad { task: TASK.into(), path, reason })?;
                board.write(&acl, &d, op)
            }),
            p,
            why,
        );
        // As a scope: refused when loaded, naming the item and the position.
        if p != "meta.*" {
            match Scope::parse(std::slice::from_ref(p)) {
                Err(Error::Scope { scope, .. }) => assert_eq!(&scope, p),
                other => panic!("{what}: as a scope: {other:?}"),
            }
        }
    }
    // A wildcard scope is a scope, not a path; "*" alone is neither.
    assert!(Scope::parse(&["meta.*".to_owned()]).is_ok());
    let e = Scope::parse(&["*".to_owned()]).unwrap_err().to_string();
    assert!(e.contains("\"*\"") && e.contains("position 0") && e.contains("wildcard"), "{e}");
    let e = Scope::parse(&["meta..x".to_owned()]).unwrap_err().to_string();
    assert!(e.contains("\"meta..x\"") && e.contains("position 5"), "{e}");
    let e = Scope::parse(&["meta.intent".to_owned(), "content/../../etc".to_owned()]).unwrap_err().to_string();
    assert!(e.contains("content/../../etc") && !e.contains("meta.intent"), "{e}");
    let e = Scope::parse(&[long]).unwrap_err().to_string();
    assert!(e.contains("at most 32 keys"), "{}", &e[e.len().saturating_sub(200)..]);
}

#[test]
fn hostile_keys_given_to_the_seeds_operations() {
    let (_dir, store, board) = seeded();
    let before = disk(&store, &board);
    let (acl, d) = (acl(), Caller::daemon());
    let v = json!("x");
    let cases: Vec<(&str, clawboard_board::Result<clawboard_board::Record>, &str, &str)> = vec![
        ("write_meta ..", board.write_meta(&acl, &d, "..", v.clone()), "meta...", "empty key"),
        ("write_meta ../", board.write_meta(&acl, &d, "../", v.clone()), "meta.../", "empty key"),
        ("write_meta x/../../etc", board.write_meta(&acl, &d, "x/../../etc", v.clone()), "meta.x/../../etc", "'/'"),
        ("write_meta ESC", board.write_meta(&acl, &d, "in\u{1b}tent", v.clone()), "meta.in\u{1b}tent", "not allowed"),
        ("write_meta *", board.write_meta(&acl, &d, "*", v.clone()), "meta.*", "not allowed"),
        ("write_meta empty", board.write_meta(&acl, &d, "", v.clone()), "meta.", "empty key"),
        ("write_content ../x", board.write_content(&acl, &d, "../x", "y", v.clone()), "content.../x.y", "empty key"),
        (
            "write_content NUL",
            board.write_content(&acl, &d, "hook", "a\u{0}", v.clone()),
            "content.hook.a\u{0}",
            "not allowed",
        ),
        ("write_control ..", board.write_control(&acl, &d, "a..b", json!(1)), "control.a..b", "empty key"),
        (
            "update_step_status ../../etc",
            board.update_step_status(&acl, &d, "../../etc", "failed"),
            "control.step_status.../../etc",
            "step id",
        ),
        (
            "update_step_status bad state",
            board.update_step_status(&acl, &d, "title", "pwned"),
            "control.step_status.title",
            "\"pwned\" is not one of pending",
        ),
    ];
    for (what, result, path, why) in cases {
        refused(&store, &board, &before, what, result, path, why);
    }
    let reads: Vec<(&str, clawboard_board::Result<Option<Value>>, &str)> = vec![
        ("read_meta ../", board.read_meta(&acl, &d, "../"), "meta.../"),
        ("read_content ../..", board.read_content(&acl, &d, "..", ".."), "content......"),
        ("read_control ESC", board.read_control(&acl, &d, "\u{1b}[2J"), "control.\u{1b}[2J"),
    ];
    for (what, result, path) in reads {
        refused(&store, &board, &before, what, result, path, "at position");
    }
}

#[test]
fn hostile_values_are_refused_naming_the_task_and_path() {
    let (_dir, store, board) = seeded();
    let before = disk(&store, &board);
    let (acl, d) = (acl(), Caller::daemon());
    let ten_mb = "x".repeat(10 << 20);
    let cases: Vec<(&str, clawboard_board::Result<clawboard_board::Record>, &str, &str)> = vec![
        (
            "a 10 MB string",
            board.write_meta(&acl, &d, "topic", json!(ten_mb.clone())),
            "meta.topic",
            "over the limit of 4194304",
        ),
        (
            "a 10 MB string in an array",
            board.write_content(&acl, &d, "body", "quotes", json!([ten_mb])),
            "content.body.quotes",
            "over the limit",
        ),
        ("U+0000", board.write_meta(&acl, &d, "topic", json!("a\u{0}b")), "meta.topic", "U+0000"),
        (
            "U+001B",
            board.write_content(&acl, &d, "hook", "title", json!("\u{1b}[31mred")),
            "content.hook.title",
            "U+001B",
        ),
        (
            "U+001B deep inside",
            board.write_content(&acl, &d, "body", "sections", json!([{"title": "ok", "content": "\u{1b}]0;x\u{7}"}])),
            "content.body.sections.0.content",
            "U+001B",
        ),
        ("U+0000 in a key", board.write_meta(&acl, &d, "mine", json!({"k\u{0}": 1})), "meta.mine", "U+0000"),
        (
            "a number for a string",
            board.write_meta(&acl, &d, "intent", json!(42)),
            "meta.intent",
            "is the number 42, not a string",
        ),
        (
            "a bad enum value",
            board.write_meta(&acl, &d, "platform", json!("myspace")),
            "meta.platform",
            "\"myspace\" is not one of xiaohongshu",
        ),
        (
            "a string for an object",
            board.write_meta(&acl, &d, "constraints", json!("loud")),
            "meta.constraints",
            "not an object",
        ),
        (
            "100 levels of objects",
            board.write_meta(&acl, &d, "mine", nested(100, false)),
            "meta.mine",
            "deeper than 64",
        ),
        (
            "100 levels of arrays",
            board.write_control(&acl, &d, "own", nested(100, true)),
            "control.own",
            "deeper than 64",
        ),
        (
            "100 levels at a known path",
            board.write_control(&acl, &d, "sensitive_filter", json!({"findings": [nested(100, false)]})),
            "control.sensitive_filter",
            "deeper than 64",
        ),
        (
            "a path through a string",
            board.write_meta(&acl, &d, "intent.x", json!(1)),
            "meta.intent.x",
            "meta.intent is a string",
        ),
    ];
    for (what, result, path, why) in cases {
        refused(&store, &board, &before, what, result, path, why);
    }
    // The limit is the board's: a smaller one refuses a smaller value.
    let small = board.clone().with_max_value_bytes(1000);
    refused(
        &store,
        &board,
        &before,
        "over a set limit",
        small.write_meta(&acl, &d, "topic", json!("y".repeat(1000))),
        "meta.topic",
        "over the limit of 1000",
    );
    // Tab and newlines are text, not control characters to refuse.
    assert!(board.write_meta(&acl, &d, "topic", json!("a\tb\r\nc")).is_ok());
}

#[test]
fn non_utf8_bytes_never_reach_the_board() {
    // A value arrives as JSON bytes; bytes that are not UTF-8 are refused by the
    // JSON layer itself, before any write is built.
    for bytes in [&b"\"\xff\xfe\""[..], b"{\"k\xc3\x28\": 1}", b"[\"\xed\xa0\x80\"]", b"\"\xc0\xaf..\""] {
        let e = serde_json::from_slice::<Value>(bytes).unwrap_err();
        assert!(e.is_syntax(), "{bytes:?}: {e}");
        assert!(e.to_string().contains("invalid unicode"), "{bytes:?}: {e}");
    }
    // What a lossy decoding would give (U+FFFD) is printable text and is kept as is.
    let (_dir, store, board) = seeded();
    let lossy = String::from_utf8_lossy(b"a\xffb").into_owned();
    board.write_meta(&acl(), &Caller::daemon(), "topic", json!(lossy)).unwrap();
    assert_eq!(board.load().unwrap().meta_zone["topic"], json!("a\u{fffd}b"));
    assert_eq!(history_listing(&store, TASK).len(), 4);
}

#[test]
fn a_hostile_task_id_is_refused() {
    let (_dir, store) = store();
    for id in ["../etc", "", "a/b", ".."] {
        let e = TaskBoard::new(&store, id).unwrap_err();
        assert!(matches!(e, Error::Bad { .. }), "{id:?}: {e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("task {id}: (task): not a valid task id")), "{msg}");
    }
    assert!(!store.root().join("etc").exists());
}

#[test]
fn whole_zone_writes_and_reads() {
    let (_dir, store, board) = seeded();
    let before = disk(&store, &board);
    let (acl, d) = (acl(), Caller::daemon());
    let e = Op::set(BoardPath::parse("meta").unwrap(), json!({"intent": "x"})).unwrap_err();
    assert_eq!(e.0, "meta");
    assert!(e.1.contains("whole zone"), "{e:?}");
    // A whole zone is readable (it is the zone), never writable.
    let zone = board.read(&acl, &d, &board.parse("content").unwrap()).unwrap().unwrap();
    assert_eq!(zone, json!({"hook": {"selected": "5个AI工具让你效率翻倍"}}));
    assert_eq!(disk(&store, &board), before);
}

/// `Op::write_meta`, `write_content` and `write_control` (and so the board's
/// `write_meta` …) check each key of a dotted key but not how many there are:
/// `BoardPath::parse` refuses more than `MAX_KEYS` (32), these do not. A 33-key
/// write is accepted, and then `at()` cannot fold the history (its record's path no
/// longer parses); ~130 keys nest board.json deeper than serde_json's recursion
/// limit, so every later `load()` and write fails; 10,000 keys overflow the stack
/// and abort the process.
#[test]
fn a_dotted_key_longer_than_max_keys_is_refused() {
    for n in [33usize, 200, 10_000] {
        let (_dir, store, board) = seeded();
        let before = disk(&store, &board);
        let key = vec!["a"; n].join(".");
        let what = format!("write_meta with {n} keys");
        refused(
            &store,
            &board,
            &before,
            &what,
            board.write_meta(&acl(), &Caller::daemon(), &key, json!(1)),
            "meta.a.a",
            "32",
        );
        let seq = board.load().unwrap().seq;
        assert_eq!(board.at(seq).unwrap(), board.load().unwrap(), "{what}: the history still folds");
    }
}
