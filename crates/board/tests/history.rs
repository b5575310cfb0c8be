#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The board's write history (seed 000, 版本追踪): every write is one record,
//! numbered 1..=n without gaps; the board is what the records fold to; a refused
//! write leaves no trace; a crash between a record and `board.json` loses nothing.

mod common;

use clawboard_board::{BoardPath, Caller, Error, ErrorEntry, Op, OpName, TaskBoard};
use clawboard_core::acl::Component;
use clawboard_core::formats::{STEP_STATES, Zone};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use common::{acl, board_json_path, board_on_disk, history_listing, store, tree};

const TASK: &str = "t-history";

/// One generated write.
#[derive(Debug, Clone)]
enum Gen {
    /// A `zone.key…` path and a value of the type the seed gives it.
    Set(&'static str, Value),
    Error(ErrorEntry),
    Status(&'static str, &'static str),
}

fn text() -> impl Strategy<Value = String> {
    // Printable text (no control characters), Chinese included.
    prop_oneof!["[a-z0-9 ]{0,12}", "\\PC{0,12}", Just("写一篇关于AI的小红书".to_owned())]
}

fn variants() -> impl Strategy<Value = Value> {
    prop::collection::vec((text(), text(), 0u32..100), 0..4).prop_map(|vs| {
        Value::Array(vs.into_iter().map(|(t, c, s)| json!({"type": t, "content": c, "score": s})).collect())
    })
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::String),
        any::<i64>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
        prop::collection::vec(text(), 0..3).prop_map(|v| json!(v)),
    ]
}

/// Known and unknown keys of each zone, with type-correct values. No path is set to
/// a non-object where another path goes through it, so every write is valid.
fn set_op() -> impl Strategy<Value = Gen> {
    let styles = prop::sample::select(vec!["professional", "casual", "humorous", "inspirational", "educational"]);
    let platforms = prop::sample::select(vec!["xiaohongshu", "wechat", "twitter", "general"]);
    prop_oneof![
        text().prop_map(|s| Gen::Set("meta.intent", json!(s))),
        styles.prop_map(|s| Gen::Set("meta.style", json!(s))),
        platforms.prop_map(|s| Gen::Set("meta.platform", json!(s))),
        any::<u32>().prop_map(|n| Gen::Set("meta.constraints.word_count.max", json!(n))),
        text().prop_map(|s| Gen::Set("meta.constraints.tone", json!(s))),
        text().prop_map(|s| Gen::Set("meta.constraints", json!({"tone": s, "must_include": [s]}))),
        scalar().prop_map(|v| Gen::Set("meta.mine", v)),
        scalar().prop_map(|v| Gen::Set("meta.extra.deep.k", v)),
        variants().prop_map(|v| Gen::Set("content.hook.variants", v)),
        text().prop_map(|s| Gen::Set("content.hook.selected", json!(s))),
        text().prop_map(|s| Gen::Set("content.hook", json!({"title": s}))),
        text().prop_map(|s| Gen::Set("content.body.content", json!(s))),
        prop::collection::vec(text(), 0..4).prop_map(|v| Gen::Set("content.hashtags", json!(v))),
        text().prop_map(|s| Gen::Set("content.custom.note", json!(s))),
        (0.0f64..100.0).prop_map(|f| Gen::Set("control.quality_scores.virality", json!(f))),
        any::<u32>().prop_map(|n| Gen::Set("control.iteration_count", json!(n))),
        text().prop_map(|s| Gen::Set("control.current_stage", json!(s))),
        any::<u8>().prop_map(|n| Gen::Set("control.retries.title", json!(n))),
        any::<bool>().prop_map(|b| Gen::Set(
            "control.sensitive_filter",
            json!({"passed": b, "findings": [{"word": "x"}], "fixes_applied": []})
        )),
        scalar().prop_map(|v| Gen::Set("control.own_thing", v)),
    ]
}

fn gen_op() -> impl Strategy<Value = Gen> {
    prop_oneof![
        6 => set_op(),
        1 => (text(), text()).prop_map(|(t, m)| Gen::Error(ErrorEntry {
            step_id: "body".into(),
            error_type: t,
            message: m,
            timestamp: "2026-02-25T19:00:00+08:00".into(),
        })),
        1 => (prop::sample::select(vec!["title", "body", "cta"]), prop::sample::select(STEP_STATES.to_vec()))
            .prop_map(|(s, st)| Gen::Status(s, st)),
    ]
}

/// Makes the write through the seed's operation for its zone.
fn perform(board: &TaskBoard, g: &Gen) -> clawboard_board::Result<clawboard_board::Record> {
    let acl = acl();
    let who = Caller::daemon();
    match g {
        Gen::Set(path, v) => {
            let (zone, rest) = path.split_once('.').unwrap();
            match zone {
                "meta" => board.write_meta(&acl, &who, rest, v.clone()),
                "content" => {
                    let (z, k) = rest.split_once('.').unwrap_or((rest, ""));
                    board.write_content(&acl, &who, z, k, v.clone())
                }
                "control" => board.write_control(&acl, &who, rest, v.clone()),
                other => panic!("no zone {other}"),
            }
        }
        Gen::Error(e) => board.append_error(&acl, &who, e),
        Gen::Status(s, st) => board.update_step_status(&acl, &who, s, st),
    }
}

/// An independent model of the three zones: plain JSON, set by walking keys.
fn model_apply(model: &mut Value, g: &Gen) {
    let set = |model: &mut Value, path: &str, v: Value| {
        let mut parts = path.split('.');
        let zone = format!("{}_zone", parts.next().unwrap());
        let keys: Vec<&str> = parts.collect();
        let mut cur = model.get_mut(&zone).unwrap();
        for k in &keys[..keys.len() - 1] {
            let obj = cur.as_object_mut().unwrap();
            cur = obj.entry((*k).to_owned()).or_insert_with(|| json!({}));
        }
        cur.as_object_mut().unwrap().insert(keys[keys.len() - 1].to_owned(), v);
    };
    match g {
        Gen::Set(path, v) => set(model, path, v.clone()),
        Gen::Error(e) => {
            let control = model["control_zone"].as_object_mut().unwrap();
            let errors = control.entry("errors").or_insert_with(|| json!([]));
            errors.as_array_mut().unwrap().push(serde_json::to_value(e).unwrap());
        }
        Gen::Status(s, st) => set(model, &format!("control.step_status.{s}"), json!(st)),
    }
}

fn gen_path(g: &Gen) -> String {
    match g {
        Gen::Set(p, _) => (*p).to_owned(),
        Gen::Error(_) => "control.errors".to_owned(),
        Gen::Status(s, _) => format!("control.step_status.{s}"),
    }
}

fn gen_name(g: &Gen) -> OpName {
    match g {
        Gen::Set(p, _) if p.starts_with("meta.") => OpName::WriteMeta,
        Gen::Set(p, _) if p.starts_with("content.") => OpName::WriteContent,
        Gen::Set(..) => OpName::WriteControl,
        Gen::Error(_) => OpName::AppendError,
        Gen::Status(..) => OpName::UpdateStepStatus,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_board_is_the_fold_of_its_history(ops in prop::collection::vec(gen_op(), 1..40)) {
        let (_dir, store) = store();
        let board = TaskBoard::new(&store, TASK).unwrap();
        let mut model = json!({"meta_zone": {}, "content_zone": {}, "control_zone": {}});
        let mut models = vec![model.clone()];
        let mut seqs = Vec::new();
        for g in &ops {
            let rec = perform(&board, g).unwrap_or_else(|e| panic!("{g:?}: {e}"));
            seqs.push(rec.seq);
            model_apply(&mut model, g);
            models.push(model.clone());
        }
        let n = ops.len() as u64;
        prop_assert_eq!(&seqs, &(1..=n).collect::<Vec<_>>(), "every seq is 1..=n, no gaps");

        let loaded = board.load().unwrap();
        prop_assert_eq!(loaded.seq, n);
        prop_assert_eq!(&loaded, &board.at(n).unwrap(), "load() is the fold of the whole history");
        prop_assert_eq!(&loaded, &board_on_disk(&store, &board), "board.json is what load() gives");
        prop_assert_eq!(&loaded.zones(), &model, "the board is what the writes say");

        // Every prefix of the history folds to the model after that many writes.
        for (k, m) in models.iter().enumerate() {
            let at = board.at(k as u64).unwrap();
            prop_assert_eq!(at.seq, k as u64);
            prop_assert_eq!(&at.zones(), m, "at({})", k);
        }

        let history = board.history(None).unwrap();
        prop_assert_eq!(history.len() as u64, n);
        for (i, (r, g)) in history.iter().zip(&ops).enumerate() {
            prop_assert_eq!(r.seq, i as u64 + 1);
            prop_assert_eq!(&r.path, &gen_path(g));
            prop_assert_eq!(r.op, gen_name(g));
            prop_assert_eq!(r.component.as_str(), "orchestrator");
            prop_assert_eq!(r.actor.role.as_str(), "daemon");
        }
        // One file per record, nothing else.
        let expected: Vec<String> = (1..=n).map(|s| format!("{s:010}.json")).collect();
        prop_assert_eq!(history_listing(&store, TASK), expected);
    }
}

/// Writes that seed the board for the tests below.
fn seeded() -> (tempfile::TempDir, clawboard_core::Store, TaskBoard) {
    let (dir, store) = store();
    let board = TaskBoard::new(&store, TASK).unwrap();
    let (acl, d) = (acl(), Caller::daemon());
    board.write_meta(&acl, &d, "intent", json!("写一篇关于AI的小红书")).unwrap();
    board.write_meta(&acl, &d, "topic", json!("AI")).unwrap();
    board.write_meta(&acl, &d, "mine", json!("a string, not an object")).unwrap();
    board.write_content(&acl, &d, "hook", "selected", json!("5个AI工具让你效率翻倍")).unwrap();
    board.update_step_status(&acl, &d, "title", "completed").unwrap();
    (dir, store, board)
}

#[test]
fn a_refused_or_bad_write_changes_nothing() {
    let (_dir, store, board) = seeded();
    let (acl, d) = (acl(), Caller::daemon());
    let before = tree(&store, TASK);
    let listing = history_listing(&store, TASK);
    let board_bytes = std::fs::read(board_json_path(&store, &board)).unwrap();
    let seq = board.load().unwrap().seq;

    let small = board.clone().with_max_value_bytes(16);
    let worker = Caller::role("r", "inst-1", Component::Worker, "test");
    // (what, the result, the path the error must name)
    let attempts: Vec<(&str, clawboard_board::Result<clawboard_board::Record>, &str)> = vec![
        ("wrong type", board.write_meta(&acl, &d, "intent", json!(42)), "meta.intent"),
        ("bad enum", board.write_meta(&acl, &d, "platform", json!("myspace")), "meta.platform"),
        ("through a typed string", board.write_meta(&acl, &d, "topic.x", json!(1)), "meta.topic.x"),
        ("through an untyped string", board.write_meta(&acl, &d, "mine.x.y", json!(1)), "meta.mine.x.y"),
        (
            "through a string, nested",
            board.write_content(&acl, &d, "hook", "selected.x", json!("t")),
            "content.hook.selected.x",
        ),
        (
            "unknown zone",
            board.parse("secrets.x").and_then(|p| {
                let op =
                    Op::set(p, json!(1)).map_err(|(path, reason)| Error::Bad { task: TASK.into(), path, reason })?;
                board.write(&acl, &d, op)
            }),
            "secrets.x",
        ),
        (
            "a whole zone",
            Op::set(BoardPath::new(Zone::Meta, &[]), json!({"intent": "x"}))
                .map_err(|(path, reason)| Error::Bad { task: TASK.into(), path, reason })
                .and_then(|op| board.write(&acl, &d, op)),
            "meta",
        ),
        ("over the value limit", small.write_meta(&acl, &d, "topic", json!("x".repeat(100))), "meta.topic"),
        ("bad step state", board.update_step_status(&acl, &d, "title", "done"), "control.step_status.title"),
        (
            "bad error entry",
            board.write(
                &acl,
                &d,
                Op {
                    name: OpName::AppendError,
                    path: BoardPath::new(Zone::Control, &["errors"]),
                    value: json!({"step_id": "x"}),
                },
            ),
            "control.errors",
        ),
        (
            "refused by the zone table",
            board.write_control(&acl, &worker, "current_stage", json!("x")),
            "control.current_stage",
        ),
        ("bad key", board.write_meta(&acl, &d, "a..b", json!(1)), "meta.a..b"),
    ];
    for (what, result, path) in attempts {
        let e = match result {
            Ok(r) => panic!("{what}: accepted as record {}", r.seq),
            Err(e) => e,
        };
        assert!(matches!(e, Error::Bad { .. } | Error::Refused { .. }), "{what}: {e:?}");
        let msg = e.to_string();
        assert!(msg.contains(TASK) && msg.contains(path), "{what}: the error names the task and {path}: {msg}");
        assert_eq!(tree(&store, TASK), before, "{what}: the task's files changed");
        assert_eq!(history_listing(&store, TASK), listing, "{what}: the history changed");
        assert_eq!(std::fs::read(board_json_path(&store, &board)).unwrap(), board_bytes, "{what}: board.json changed");
    }
    assert_eq!(board.load().unwrap().seq, seq);
    // And the board still takes a good write, numbered next.
    assert_eq!(board.write_meta(&acl, &d, "topic", json!("AI工具")).unwrap().seq, seq + 1);
}

#[test]
fn a_crash_between_the_record_and_board_json_loses_nothing() {
    let (_dir, store, board) = seeded();
    let (acl, d) = (acl(), Caller::daemon());
    let path = board_json_path(&store, &board);
    let old_bytes = std::fs::read(&path).unwrap();
    let old = board.load().unwrap();
    board
        .write_content(&acl, &d, "hook", "variants", json!([{"type": "numeric", "content": "5个AI工具", "score": 85}]))
        .unwrap();
    board.write_control(&acl, &d, "quality_scores.virality", json!(82)).unwrap();
    board
        .append_error(
            &acl,
            &d,
            &ErrorEntry {
                step_id: "body".into(),
                error_type: "timeout".into(),
                message: "m".into(),
                timestamp: "t".into(),
            },
        )
        .unwrap();
    let full = board.load().unwrap();
    let last = full.seq;
    assert_eq!(last, old.seq + 3);

    // board.json put back to before the last three writes: they are folded in again.
    std::fs::write(&path, &old_bytes).unwrap();
    assert_eq!(board_on_disk(&store, &board).seq, old.seq, "the older copy is in place");
    assert_eq!(board.load().unwrap(), board.at(last).unwrap());
    assert_eq!(board.load().unwrap(), full);

    // board.json lost altogether: the history alone gives the board.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(board.load().unwrap(), full);
    assert_eq!(board.at(last).unwrap(), full);

    // board.json is written without fsync: what a power loss may leave of it, an
    // empty file or a torn one, is folded from the history alone too.
    for damaged in [&b""[..], &old_bytes[..old_bytes.len() / 2]] {
        std::fs::write(&path, damaged).unwrap();
        assert_eq!(board.load().unwrap(), full);
    }

    // A write that restates what the board holds records nothing.
    std::fs::write(&path, &old_bytes).unwrap();
    let same = board.write_if_changed(&acl, &d, Op::write_control("quality_scores.virality", json!(82)).unwrap());
    assert!(same.unwrap().is_none());
    assert_eq!(board.load().unwrap(), full);
    assert_eq!(board.history(None).unwrap().len() as u64, last);

    // The next write after the crash is numbered after every record and lands on
    // a board that has them all.
    std::fs::write(&path, &old_bytes).unwrap();
    let r = board.write_control(&acl, &d, "current_stage", json!("review")).unwrap();
    assert_eq!(r.seq, last + 1);
    let now = board_on_disk(&store, &board);
    assert_eq!(now.seq, last + 1);
    assert_eq!(now, board.at(last + 1).unwrap());
    assert_eq!(now.control_zone["quality_scores"]["virality"], 82);
    assert_eq!(now.control_zone["errors"].as_array().map(Vec::len), Some(1));
    assert_eq!(board.history(None).unwrap().len() as u64, last + 1);
}

#[test]
fn stray_temp_files_in_the_history_are_not_records() {
    let (_dir, store, board) = seeded();
    let (acl, d) = (acl(), Caller::daemon());
    let full = board.load().unwrap();
    let dir = store.root().join("tasks").join(TASK).join("board").join("history");
    // A stranger's temp-like file, and the temp file a crash before a record's
    // rename leaves (".{name}.clawboard-tmp.{pid}.{n}"), half written.
    std::fs::write(dir.join(".x.clawboard-tmp.1.2"), b"garbage").unwrap();
    std::fs::write(dir.join(format!(".{:010}.json.clawboard-tmp.1.3", full.seq + 1)), b"{\"seq\": 9").unwrap();
    assert_eq!(board.load().unwrap(), full);
    assert_eq!(board.at(full.seq).unwrap(), full);
    assert_eq!(board.at(full.seq + 5).unwrap(), full);
    assert_eq!(board.history(None).unwrap().len() as u64, full.seq);
    let r = board.write_meta(&acl, &d, "style", json!("casual")).unwrap();
    assert_eq!(r.seq, full.seq + 1);
    assert_eq!(board.load().unwrap(), board.at(r.seq).unwrap());
    assert_eq!(board.history(None).unwrap().len() as u64, r.seq);
}

#[test]
fn history_filters_by_path() {
    let (_dir, store) = store();
    let board = TaskBoard::new(&store, TASK).unwrap();
    let (acl, d) = (acl(), Caller::daemon());
    let variants = json!([{"type": "numeric", "content": "5个AI工具", "score": 85}]);
    let v = board.write_content(&acl, &d, "hook", "variants", variants.clone()).unwrap().seq;
    let body = board.write_content(&acl, &d, "body", "content", json!("正文")).unwrap().seq;
    let intent = board.write_meta(&acl, &d, "intent", json!("写一篇")).unwrap().seq;
    let sel = board.write_content(&acl, &d, "hook", "selected", json!("5个AI工具")).unwrap().seq;
    let hook = board.write_content(&acl, &d, "hook", "", json!({"title": "t"})).unwrap().seq;

    let seqs = |p: &str| -> Vec<u64> {
        board.history(Some(&BoardPath::parse(p).unwrap())).unwrap().iter().map(|r| r.seq).collect()
    };
    assert_eq!(seqs("content.hook"), vec![v, sel, hook], "the zone's key and everything under it");
    assert_eq!(seqs("content.hook.variants"), vec![v, hook], "the path itself and a write of its parent");
    assert_eq!(seqs("content.body"), vec![body]);
    assert!(!seqs("content.body").contains(&v));
    assert_eq!(seqs("content.body.content"), vec![body]);
    assert_eq!(seqs("meta"), vec![intent]);
    assert_eq!(seqs("content"), vec![v, body, sel, hook]);
    assert!(seqs("control").is_empty());
    let rec = &board.history(Some(&BoardPath::parse("content.hook.variants").unwrap())).unwrap()[0];
    assert_eq!((rec.path.as_str(), &rec.value, rec.op), ("content.hook.variants", &variants, OpName::WriteContent));
}

#[test]
fn a_record_is_what_the_write_returned() {
    let (_dir, store) = store();
    let board = TaskBoard::new(&store, TASK).unwrap();
    let acl = acl();
    let skill = Caller::role("hook-generator", "inst-7", Component::Skill, "test");
    let r = board.write_content(&acl, &skill, "hook", "opening", json!("你还在手动整理资料吗？")).unwrap();
    assert_eq!(board.history(None).unwrap(), vec![r.clone()]);
    assert_eq!((r.actor.role.as_str(), r.actor.instance.as_deref()), ("hook-generator", Some("inst-7")));
    assert_eq!(r.component, "skill");
    let h = board.write_meta(&acl, &Caller::human(), "style", json!("casual")).unwrap();
    assert_eq!((h.component.as_str(), h.actor.role.as_str(), h.actor.instance.as_deref()), ("human", "human", None));
    let mut expected = Map::new();
    expected.insert("style".into(), json!("casual"));
    assert_eq!(board.load().unwrap().meta_zone, expected);
}
