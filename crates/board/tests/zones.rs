#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Seed 000's zone permission table (Zone 访问权限), cell by cell, through
//! [`TaskBoard`]'s own operations: what a cell allows succeeds, what it does not is
//! refused naming the rule, and changes nothing on disk.

mod common;

use clawboard_board::{Caller, Error, ErrorEntry, TaskBoard};
use clawboard_core::Store;
use clawboard_core::acl::Component;
use clawboard_core::formats::Zone;
use serde_json::{Value, json};

use common::{acl, store, tree};

/// Seed 000, "Zone 访问权限", as the seed writes it.
const SEED_ZONE_TABLE: &str = "
| 组件类型 | Meta Zone | Content Zone | Control Zone |
|----------|-----------|--------------|--------------|
| Orchestrator | R/W | R | R/W |
| Workers | R (via slice) | W | - |
| Skills | R (via slice) | R/W | R |
| Middleware | R | R/W | R/W |
| Slicer | R | R | R |
";

/// Seed 000, "写入操作": who calls `append_error`.
const SEED_APPEND_ERROR: &str = "| `append_error(error)` | 追加错误记录 | 所有组件 |";

const TASK: &str = "t-zones";

/// One cell of the seed's table.
#[derive(Debug, Clone, Copy)]
struct Cell {
    /// Direct reads (`read_meta` …).
    read: bool,
    /// "R (via slice)": read only through the step's slice.
    via_slice: bool,
    write: bool,
    /// The seed's cell as the ACL file writes it.
    letters: &'static str,
}

fn parse_cell(s: &str) -> Cell {
    let c = |read, via_slice, write, letters| Cell { read, via_slice, write, letters };
    match s {
        "R/W" => c(true, false, true, "RW"),
        "R" => c(true, false, false, "R"),
        "W" => c(false, false, true, "W"),
        "R (via slice)" => c(false, true, false, "S"),
        "-" => c(false, false, false, "-"),
        other => panic!("the seed's table has no cell {other:?}"),
    }
}

fn component(s: &str) -> Component {
    match s {
        "Orchestrator" => Component::Orchestrator,
        "Workers" => Component::Worker,
        "Skills" => Component::Skill,
        "Middleware" => Component::Middleware,
        "Slicer" => Component::Slicer,
        other => panic!("the seed's table has no component {other:?}"),
    }
}

/// The table: each component with its meta, content and control cells.
fn seed_table() -> Vec<(Component, [Cell; 3])> {
    let rows: Vec<Vec<&str>> = SEED_ZONE_TABLE
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows[0], ["组件类型", "Meta Zone", "Content Zone", "Control Zone"]);
    let out: Vec<(Component, [Cell; 3])> =
        rows[2..].iter().map(|r| (component(r[0]), [parse_cell(r[1]), parse_cell(r[2]), parse_cell(r[3])])).collect();
    assert_eq!(out.len(), Component::ALL.len(), "every component has a row");
    out
}

/// Who may `append_error`. The seed says 所有组件 (all components); the slicer is the
/// one component whose row writes nowhere (R, R, R) and the ACL gives it no append
/// either: "all components" is read as every component that writes to the board.
fn may_append(cells: &[Cell; 3]) -> bool {
    let callers = SEED_APPEND_ERROR.trim_matches('|').split('|').map(str::trim).nth(2).unwrap();
    assert_eq!(callers, "所有组件");
    cells.iter().any(|c| c.write)
}

fn zone_index(z: Zone) -> usize {
    Zone::ALL.iter().position(|x| *x == z).unwrap()
}

/// A board with one value in each zone, written by the daemon.
fn seeded() -> (tempfile::TempDir, Store, TaskBoard) {
    let (dir, store) = store();
    let board = TaskBoard::new(&store, TASK).unwrap();
    let (acl, d) = (acl(), Caller::daemon());
    board.write_meta(&acl, &d, "intent", json!("写一篇关于AI的小红书")).unwrap();
    board.write_content(&acl, &d, "hook", "selected", json!("5个AI工具让你效率翻倍")).unwrap();
    board.write_control(&acl, &d, "current_stage", json!("draft")).unwrap();
    (dir, store, board)
}

fn caller(c: Component) -> Caller {
    Caller::role("r", "inst-1", c, "test")
}

/// A direct read of one key in `zone`: (the path read, what it returns, the value there).
fn read(board: &TaskBoard, who: &Caller, zone: Zone) -> (&'static str, clawboard_board::Result<Option<Value>>, Value) {
    let acl = acl();
    match zone {
        Zone::Meta => ("meta.intent", board.read_meta(&acl, who, "intent"), json!("写一篇关于AI的小红书")),
        Zone::Content => {
            ("content.hook.selected", board.read_content(&acl, who, "hook", "selected"), json!("5个AI工具让你效率翻倍"))
        }
        Zone::Control => ("control.current_stage", board.read_control(&acl, who, "current_stage"), json!("draft")),
    }
}

/// A write made when called: what `writes` hands out.
type Write<'a> = Box<dyn Fn() -> clawboard_board::Result<clawboard_board::Record> + 'a>;

/// Writes into `zone` through the seed's operation for it: (path, the write, value).
fn writes<'a>(board: &'a TaskBoard, who: &'a Caller, zone: Zone) -> Vec<(String, Write<'a>, Value)> {
    match zone {
        Zone::Meta => {
            vec![(
                "meta.topic".into(),
                Box::new(move || board.write_meta(&acl(), who, "topic", json!("AI"))),
                json!("AI"),
            )]
        }
        Zone::Content => vec![(
            "content.hook.title".into(),
            Box::new(move || board.write_content(&acl(), who, "hook", "title", json!("标题"))),
            json!("标题"),
        )],
        Zone::Control => vec![
            (
                "control.current_stage".into(),
                Box::new(move || board.write_control(&acl(), who, "current_stage", json!("review"))),
                json!("review"),
            ),
            (
                "control.step_status.title".into(),
                Box::new(move || board.update_step_status(&acl(), who, "title", "running")),
                json!("running"),
            ),
        ],
    }
}

fn error_entry() -> ErrorEntry {
    ErrorEntry {
        step_id: "title".into(),
        error_type: "timeout".into(),
        message: "the worker did not answer".into(),
        timestamp: "2026-02-25T19:00:00+08:00".into(),
    }
}

/// Checks a refusal: the task, the path and the rule are named; `extra` too.
fn check_refused(what: &str, e: &Error, path: &str, rule: &str, extra: Option<&str>, problems: &mut Vec<String>) {
    match e {
        Error::Refused { task, path: p, decision } => {
            let msg = e.to_string();
            if task != TASK || p != path || decision.rule != rule || decision.allowed {
                problems
                    .push(format!("{what}: refused as {task} {p} {:?}, wanted {TASK} {path} {rule}", decision.rule));
            }
            if !(msg.contains(rule) && msg.contains(TASK) && msg.contains(path)) {
                problems.push(format!("{what}: the message does not name {rule}, {TASK} and {path}: {msg}"));
            }
            if let Some(x) = extra
                && !msg.contains(x)
            {
                problems.push(format!("{what}: the message does not say {x:?}: {msg}"));
            }
        }
        other => problems.push(format!("{what}: {other} (not a refusal)")),
    }
}

#[test]
fn every_cell_of_the_seeds_zone_table() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (comp, cells) in seed_table() {
        let who = caller(comp);
        for zone in Zone::ALL {
            let cell = cells[zone_index(zone)];
            let rule = format!("[zones.{}] {} = \"{}\"", comp.name(), zone.name(), cell.letters);

            // Read.
            let (_dir, store, board) = seeded();
            let before = tree(&store, TASK);
            let (path, got, value) = read(&board, &who, zone);
            let what = format!("{} read {path}", comp.name());
            match (cell.read, got) {
                (true, Ok(Some(v))) if v == value => {}
                (true, other) => problems.push(format!("{what}: allowed by the seed, got {other:?}")),
                (false, Ok(v)) => problems.push(format!("{what}: refused by the seed, read {v:?}")),
                (false, Err(e)) => {
                    let extra = cell.via_slice.then_some("only through the slice");
                    check_refused(&what, &e, path, &rule, extra, &mut problems);
                }
            }
            // The whole zone, too.
            let whole = board.read(&acl(), &who, &clawboard_board::BoardPath::new(zone, &[]));
            if whole.is_ok() != cell.read {
                problems.push(format!("{} read {}: {whole:?}", comp.name(), zone.name()));
            }
            if tree(&store, TASK) != before {
                problems.push(format!("{what}: the task's files changed"));
            }
            checked += 1;

            // Write.
            let (_dir, store, board) = seeded();
            for (path, write, value) in writes(&board, &who, zone) {
                let before = tree(&store, TASK);
                let seq = board.load().unwrap().seq;
                let what = format!("{} write {path}", comp.name());
                match (cell.write, write()) {
                    (true, Ok(r)) => {
                        let now = board.load().unwrap();
                        let at = clawboard_board::BoardPath::parse(&path).unwrap();
                        if r.seq != seq + 1 || now.seq != r.seq || clawboard_board::ops::get(&now, &at) != Some(&value)
                        {
                            problems.push(format!("{what}: record {} but the board is {:?}", r.seq, now.zones()));
                        }
                        if r.component != comp.name()
                            || r.actor.role != "r"
                            || r.actor.instance.as_deref() != Some("inst-1")
                        {
                            problems.push(format!("{what}: recorded as {:?} {:?}", r.component, r.actor));
                        }
                    }
                    (true, Err(e)) => problems.push(format!("{what}: allowed by the seed, got {e}")),
                    (false, Ok(r)) => {
                        problems.push(format!("{what}: refused by the seed, written as record {}", r.seq))
                    }
                    (false, Err(e)) => {
                        check_refused(&what, &e, &path, &rule, None, &mut problems);
                        if tree(&store, TASK) != before || board.load().unwrap().seq != seq {
                            problems.push(format!("{what}: refused, but the task's files changed"));
                        }
                    }
                }
                checked += 1;
            }
        }

        // append_error.
        let (_dir, store, board) = seeded();
        let before = tree(&store, TASK);
        let what = format!("{} append_error", comp.name());
        let may = may_append(&cells);
        let rule = format!("[zones.{}] errors = \"{}\"", comp.name(), if may { "A" } else { "-" });
        match (may, board.append_error(&acl(), &who, &error_entry())) {
            (true, Ok(r)) => {
                let errors = board.load().unwrap().control_zone["errors"].clone();
                if errors != json!([serde_json::to_value(error_entry()).unwrap()]) || r.component != comp.name() {
                    problems.push(format!("{what}: control.errors is {errors}"));
                }
            }
            (true, Err(e)) => problems.push(format!("{what}: allowed by the seed, got {e}")),
            (false, Ok(r)) => problems.push(format!("{what}: refused, written as record {}", r.seq)),
            (false, Err(e)) => {
                check_refused(&what, &e, "control.errors", &rule, None, &mut problems);
                if tree(&store, TASK) != before {
                    problems.push(format!("{what}: refused, but the task's files changed"));
                }
            }
        }
        checked += 1;
    }
    assert!(problems.is_empty(), "{} of {checked} checks failed:\n{}", problems.len(), problems.join("\n"));
    // 5 components × (3 reads + meta, content and 2 control writes) + 5 appends.
    assert_eq!(checked, 5 * (3 + 4) + 5);
}

#[test]
fn the_seeds_table_is_the_acls_table() {
    // The same cells, asked of the ACL directly, with the rule it names.
    let acl = acl();
    for (comp, cells) in seed_table() {
        for zone in Zone::ALL {
            let cell = cells[zone_index(zone)];
            let rule = format!("[zones.{}] {} = \"{}\"", comp.name(), zone.name(), cell.letters);
            let r = acl.check_board("r", comp, "test", clawboard_core::acl::BoardOp::Read, zone);
            let w = acl.check_board("r", comp, "test", clawboard_core::acl::BoardOp::Write, zone);
            assert_eq!((r.allowed, w.allowed), (cell.read, cell.write), "{rule}");
            assert_eq!((r.rule.as_str(), w.rule.as_str()), (rule.as_str(), rule.as_str()));
            assert_eq!(r.component, Some(comp));
        }
    }
}

#[test]
fn a_worker_is_refused_the_control_zone_naming_the_rule() {
    // The example the brief gives, spelled out.
    let (_dir, store, board) = seeded();
    let before = tree(&store, TASK);
    let worker = caller(Component::Worker);
    let e = board.write_control(&acl(), &worker, "current_stage", json!("done")).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(r#"[zones.worker] control = "-""#), "{msg}");
    assert!(msg.starts_with(&format!("task {TASK}: control.current_stage: refused")), "{msg}");
    let e = board.read_meta(&acl(), &worker, "intent").unwrap_err().to_string();
    assert!(e.contains(r#"[zones.worker] meta = "S""#) && e.contains("only through the slice"), "{e}");
    assert_eq!(tree(&store, TASK), before);
}

#[test]
fn human_and_daemon_may_do_everything() {
    for (who, recorded) in [(Caller::human(), "human"), (Caller::daemon(), "orchestrator")] {
        let (_dir, _store, board) = seeded();
        let acl = acl();
        for zone in Zone::ALL {
            let (path, got, value) = read(&board, &who, zone);
            assert_eq!(got.unwrap(), Some(value), "{} read {path}", who.role);
            for (path, write, value) in writes(&board, &who, zone) {
                let r = write().unwrap_or_else(|e| panic!("{} write {path}: {e}", who.role));
                assert_eq!(r.component, recorded);
                let at = clawboard_board::BoardPath::parse(&path).unwrap();
                assert_eq!(clawboard_board::ops::get(&board.load().unwrap(), &at), Some(&value));
            }
        }
        board.append_error(&acl, &who, &error_entry()).unwrap();
        let snap = board.snapshot(&acl, &who).unwrap();
        assert_eq!(snap, board.load().unwrap().zones());
        assert_eq!(snap["meta_zone"]["topic"], "AI");
        assert_eq!(snap["content_zone"]["hook"]["title"], "标题");
        assert_eq!(snap["control_zone"]["step_status"]["title"], "running");
        assert_eq!(snap["control_zone"]["errors"][0]["step_id"], "title");
    }
}

#[test]
fn snapshot_needs_a_direct_read_of_every_zone() {
    let (_dir, store, board) = seeded();
    let before = tree(&store, TASK);
    for (comp, cells) in seed_table() {
        let got = board.snapshot(&acl(), &caller(comp));
        let may = cells.iter().all(|c| c.read);
        match got {
            Ok(v) => {
                assert!(may, "{}: snapshot allowed", comp.name());
                assert_eq!(v, board.load().unwrap().zones());
            }
            Err(e) => {
                assert!(!may, "{}: snapshot refused: {e}", comp.name());
                assert!(matches!(e, Error::Refused { .. }), "{e:?}");
                let msg = e.to_string();
                assert!(msg.contains(TASK) && msg.contains(&format!("[zones.{}]", comp.name())), "{msg}");
            }
        }
    }
    // The seed's table makes that: refused for workers and skills (meta via slice).
    for comp in [Component::Worker, Component::Skill] {
        let e = board.snapshot(&acl(), &caller(comp)).unwrap_err().to_string();
        assert!(e.contains(&format!("[zones.{}] meta = \"S\"", comp.name())), "{e}");
    }
    for comp in [Component::Orchestrator, Component::Middleware, Component::Slicer] {
        board.snapshot(&acl(), &caller(comp)).unwrap();
    }
    assert_eq!(tree(&store, TASK), before);
}

/// A role instance whose role id happens to be `daemon` or `human` is still a role
/// instance of its component type: the core's file ACL says so
/// (`Acl::check_instance`: "a role instance is never human or daemon"), but the
/// board's `Caller::is_builtin` looks at the role id alone, so such an instance
/// bypasses the zone table. `check_id` accepts `daemon` and `human` as role ids, and
/// the daemon's API builds `Caller::role(&inst.role, …)` from the instance's token.
#[test]
fn a_role_instance_named_daemon_or_human_is_held_to_its_component() {
    for id in ["daemon", "human"] {
        let (_dir, store, board) = seeded();
        let before = tree(&store, TASK);
        let worker = Caller::role(id, "inst-1", Component::Worker, "its token says worker");
        let got = board.write_control(&acl(), &worker, "current_stage", json!("done"));
        assert!(matches!(got, Err(Error::Refused { .. })), "{id} as a worker instance wrote control: {got:?}");
        assert_eq!(tree(&store, TASK), before);
        assert!(board.read_meta(&acl(), &worker, "intent").is_err(), "{id} as a worker read meta directly");
    }
}
