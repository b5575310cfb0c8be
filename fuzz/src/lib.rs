//! The bodies of the cargo-fuzz targets (docs/FUZZING.md), one function per target.
//!
//! Each takes the raw fuzz input and panics (assert!) only when an invariant of
//! clawboard-core is broken; refusing an input is never a failure. The same file is
//! compiled into `crates/core/tests/fuzz_corpus.rs` (`#[path]` module), which replays
//! every file of `fuzz/corpus/{target}/` through these functions in `cargo test`, so
//! the fuzz targets and the regression test can never check different things.

use std::path::{Component, Path};
use std::sync::OnceLock;
use std::time::Duration;

use clawboard_core::acl::{self, Acl, Op, Principal, check_path};
use clawboard_core::formats::{Escalation, Task, TaskSubmission};
use clawboard_core::retention::{Keep, Policy, Rule};
use clawboard_core::store::to_pretty_json;
use clawboard_core::validate::parse;
use clawboard_core::{FileKind, Format, Id, PathContext, RelPath, Timestamp, check_id};

/// A target's body: the raw fuzz input in, a panic only for a broken invariant.
pub type Body = fn(&[u8]);

/// Every target, by the name of its `fuzz_targets/{name}.rs` and `corpus/{name}/`.
pub const TARGETS: &[(&str, Body)] = &[
    ("task_parser", task_parser),
    ("escalation_parser", escalation_parser),
    ("path_check", path_check),
    ("retention_duration", retention_duration),
    ("acl_matcher", acl_matcher),
    ("acl_parse", acl_parse),
];

/// The kind and context `FileKind::infer` gives `path`, which must be `kind`.
fn context(path: &str, kind: FileKind) -> PathContext {
    match FileKind::infer(Path::new(path)) {
        Some((k, ctx)) if k == kind => ctx,
        other => panic!("FileKind::infer({path:?}) is {other:?}, not {kind:?}"),
    }
}

/// Parses `data` as a `T`; when it is accepted, its written form (as the store
/// writes it) must be accepted too and read back as the same value.
fn parse_round_trip<T: Format + PartialEq + std::fmt::Debug>(file: &str, data: &[u8], ctx: &PathContext) -> Option<T> {
    let value = parse::<T>(file, data, ctx).ok()?;
    let written = to_pretty_json(&value);
    match parse::<T>(file, written.as_bytes(), ctx) {
        Ok(again) => assert_eq!(again, value, "{file}: the written form reads back as a different value:\n{written}"),
        Err(e) => panic!("{file}: the input is accepted, but its written form is refused: {e}\n{written}"),
    }
    Some(value)
}

/// `validate::parse` as a submission (`inbox/x.json`) and as a stored task
/// (`tasks/t1/task.json`, and with no path context).
pub fn task_parser(data: &[u8]) {
    let inbox = context("inbox/x.json", FileKind::TaskSubmission);
    if let Some(sub) = parse_round_trip::<TaskSubmission>("inbox/x.json", data, &inbox) {
        // An accepted submission becomes a task that is itself valid where it is stored
        // (finding 1 of docs/FUZZING.md: an extra `completedAt` broke this).
        let id = Id::new("t1").expect("t1 is an id");
        let now = Timestamp::parse("2026-11-22T00:00:00Z").expect("a timestamp");
        let task = sub.into_task(id, now, "human");
        let written = to_pretty_json(&task);
        let t1 = context("tasks/t1/task.json", FileKind::Task);
        if let Err(e) = parse::<Task>("tasks/t1/task.json", written.as_bytes(), &t1) {
            panic!("an accepted submission becomes a task that is refused: {e}\n{written}");
        }
    }

    let t1 = context("tasks/t1/task.json", FileKind::Task);
    let in_dir = parse_round_trip::<Task>("tasks/t1/task.json", data, &t1);
    let anywhere = parse_round_trip::<Task>("task.json", data, &PathContext::default());
    if let Some(task) = &in_dir {
        assert_eq!(task.task_id.as_str(), "t1", "tasks/t1/task.json accepted with another taskId");
        // The path only adds rules: what is accepted in tasks/t1/ is accepted anywhere.
        assert_eq!(anywhere.as_ref(), Some(task), "accepted in tasks/t1/ but not without a path context");
    }
}

/// `validate::parse` of an escalation, as `escalations/{ts}.json` and as
/// `tasks/t1/escalations/{ts}.json`.
pub fn escalation_parser(data: &[u8]) {
    let top = context("escalations/20260101T000000Z.json", FileKind::Escalation);
    let in_task = context("tasks/t1/escalations/20260101T000000Z.json", FileKind::Escalation);
    let a = parse_round_trip::<Escalation>("escalations/20260101T000000Z.json", data, &top);
    let b = parse_round_trip::<Escalation>("tasks/t1/escalations/20260101T000000Z.json", data, &in_task);
    for e in a.iter().chain(b.iter()) {
        // A decision always says who made it and when; no decider without a decision.
        let decided = (e.decided_by.is_some(), e.decided_at.is_some());
        match e.decision {
            Some(_) => assert_eq!(decided, (true, true), "a decision without decidedBy/decidedAt: {e:?}"),
            None => assert_eq!(decided, (false, false), "decidedBy/decidedAt without a decision: {e:?}"),
        }
    }
    if let Some(e) = &b {
        assert!(e.task_id.as_ref().is_none_or(|id| id.as_str() == "t1"), "tasks/t1/escalations/ accepted {e:?}");
        assert_eq!(a.as_ref(), Some(e), "accepted in tasks/t1/escalations/ but not in escalations/");
    }
}

/// `acl::check_path`, `check_id` and `RelPath::new` on arbitrary UTF-8.
pub fn path_check(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };

    if check_path(s).is_ok() {
        assert!(!s.is_empty(), "check_path accepts the empty path");
        assert!(!s.starts_with('/'), "check_path accepts the absolute path {s:?}");
        assert!(!s.contains('\0'), "check_path accepts {s:?}, which contains NUL");
        assert!(!s.contains('\\'), "check_path accepts {s:?}, which contains a backslash");
        for part in s.split('/') {
            assert!(!part.is_empty(), "check_path accepts {s:?}, which has an empty component");
            assert!(part != ".." && part != ".", "check_path accepts {s:?}, which has a {part:?} component");
        }
        assert_ne!(s.split('/').next(), Some(".clawboard"), "check_path accepts {s:?}");
        // What the ACL accepts, the store accepts, as the same components.
        let rel = RelPath::new(s).unwrap_or_else(|e| panic!("check_path accepts {s:?}, RelPath::new refuses it: {e}"));
        let comps: Vec<_> = rel.as_path().components().collect();
        assert_eq!(comps.len(), s.split('/').count(), "{s:?} has other components than its / parts");
    }

    if check_id(s).is_ok() {
        assert!(!s.contains('/') && !s.contains('\\'), "check_id accepts {s:?}, which has a separator");
        assert!(!s.contains('\0'), "check_id accepts {s:?}, which contains NUL");
        assert!(s != "." && s != "..", "check_id accepts {s:?}");
        assert!(!s.is_empty() && s.len() <= clawboard_core::id::MAX_ID_LEN, "check_id accepts length {}", s.len());
        // An id is exactly one plain path component, and a valid path on its own.
        let comps: Vec<_> = Path::new(s).components().collect();
        assert!(matches!(comps.as_slice(), [Component::Normal(c)] if *c == s), "id {s:?} is not one component");
        assert!(check_path(s).is_ok(), "check_id accepts {s:?}, check_path refuses it");
        assert!(Id::new(s).is_ok(), "check_id accepts {s:?}, Id::new refuses it");
    }

    if let Ok(rel) = RelPath::new(s) {
        // Never anything that leaves the root, whatever else it tolerates.
        assert!(!s.starts_with('/') && !s.contains('\0') && !s.contains('\\'), "RelPath::new accepts {s:?}");
        for c in rel.as_path().components() {
            assert!(matches!(c, Component::Normal(_)), "RelPath::new accepts {s:?} with component {c:?}");
        }
        assert!(!s.split('/').any(|p| p == ".."), "RelPath::new accepts {s:?}");
        assert!(Path::new("/root").join(rel.as_path()).starts_with("/root"), "RelPath {s:?} leaves the root");
        assert_eq!(rel.to_string(), s, "RelPath {s:?} displays differently");
    }
}

/// `retention::Keep::parse` and `retention::Policy::parse` (YAML) on arbitrary UTF-8.
pub fn retention_duration(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(keep) = Keep::parse(s) {
        check_keep(keep, s);
        // What `describe` prints (in `retention plan`) parses back to the same whole seconds.
        let text = keep.describe();
        let again = Keep::parse(&text).unwrap_or_else(|e| panic!("{s:?} describes as {text:?}, which is refused: {e}"));
        let secs = |k: Keep| match k {
            Keep::Permanent => None,
            Keep::For(d) => Some(d.as_secs()),
        };
        assert_eq!(secs(again), secs(keep), "{s:?} describes as {text:?}, which parses to {again:?}");
    }
    if let Ok(policy) = Policy::parse("retention.yaml", s) {
        for rule in Rule::ALL {
            check_keep(policy.keep(rule), s);
        }
    }
}

fn check_keep(keep: Keep, input: &str) {
    if let Keep::For(d) = keep {
        assert!(d.is_zero() || d >= Duration::from_secs(3600), "{input:?} keeps for {d:?}, under an hour");
    }
}

/// The seed ACL (`acl::DEFAULT_ACL`), parsed once.
fn seed_acl() -> &'static Acl {
    static ACL: OnceLock<Acl> = OnceLock::new();
    ACL.get_or_init(|| match Acl::parse("config/acl.toml", acl::DEFAULT_ACL) {
        Ok(a) => a,
        Err(e) => panic!("the embedded ACL does not parse: {e}"),
    })
}

/// Splits an input into role, task and path: `role \n task \n path` (the path is the
/// rest, newlines and all; an empty task line is no task).
pub fn split_request(s: &str) -> (&str, Option<&str>, &str) {
    let mut parts = s.splitn(3, '\n');
    let role = parts.next().unwrap_or_default();
    let task = parts.next().filter(|t| !t.is_empty());
    let path = parts.next().unwrap_or_default();
    (role, task, path)
}

/// May a worker (of the seed table) write `path` when it runs for `task`?
/// Only inside its own task directory, and escalations/ (`worker = "W"`).
fn worker_may_write(task: Option<&str>, path: &str) -> bool {
    path.starts_with("escalations/") || task.is_some_and(|t| path.starts_with(&format!("tasks/{t}/")))
}

/// `Acl::check` and `Acl::check_instance` of the seed ACL, for both ops.
pub fn acl_matcher(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let acl = seed_acl();
    let (role, task, path) = split_request(s);
    let path_ok = check_path(path).is_ok();
    for op in [Op::Read, Op::Write] {
        let d = acl.check(role, task, op, path);
        let req = format!("{role:?} (task {task:?}) {op:?} {path:?}");
        assert_eq!(d.principal, Principal::of_role(role).0, "{req}: principal");
        assert!(!d.why.is_empty() && !d.rule.is_empty(), "{req}: a decision without a reason: {d:?}");
        if !path_ok {
            assert!(!d.allowed, "{req}: allowed a path check_path refuses: {d:?}");
        }
        if matches!(d.principal, Principal::Human | Principal::Daemon) {
            assert_eq!(d.allowed, path_ok, "{req}: human/daemon decision: {d:?}");
        }
        if d.allowed && op == Op::Write {
            if path == "shared/risk-limits.json" {
                assert!(
                    matches!(d.principal, Principal::Human | Principal::Daemon),
                    "{req}: only human (or the daemon) writes the risk limits: {d:?}"
                );
            }
            if d.principal == Principal::Worker {
                assert!(worker_may_write(task, path), "{req}: a worker writes outside its task: {d:?}");
            }
        }

        // A running instance is never human or daemon, whatever its role id.
        let t = task.unwrap_or("t1");
        let d = acl.check_instance(role, t, op, path);
        let req = format!("instance {role:?} (task {t:?}) {op:?} {path:?}");
        assert!(!matches!(d.principal, Principal::Human | Principal::Daemon), "{req}: {d:?}");
        if !path_ok {
            assert!(!d.allowed, "{req}: allowed a path check_path refuses: {d:?}");
        }
        if d.allowed && op == Op::Write {
            assert_ne!(path, "shared/risk-limits.json", "{req}: an instance writes the risk limits: {d:?}");
            if d.principal == Principal::Worker {
                assert!(worker_may_write(Some(t), path), "{req}: a worker writes outside its task: {d:?}");
            }
        }
    }
}

/// `Acl::parse` on arbitrary UTF-8; an ACL it accepts still refuses unsafe paths.
pub fn acl_parse(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let Ok(parsed) = Acl::parse("acl.toml", s) else { return };
    let roles = ["assistant", "gm", "validator", "platform-pm", "coding-pm", "creator-code", "human", "daemon"];
    for role in roles {
        for path in ["../x", "/etc/passwd", "tasks/../gm/x", ".clawboard/node-id", "a//b", "tasks/t1/", ""] {
            for op in [Op::Read, Op::Write] {
                let d = parsed.check(role, Some("t1"), op, path);
                assert!(!d.allowed, "a parsed ACL allows {role} {op:?} {path:?}: {d:?}\n{s}");
            }
        }
        let d = parsed.check(role, Some("t1"), Op::Write, "tasks/t1/result.json");
        if matches!(role, "human" | "daemon") {
            assert!(d.allowed, "a parsed ACL refuses {role}: {d:?}");
        }
    }
    // Parsing is a function of the text.
    assert_eq!(Acl::parse("acl.toml", s).ok().as_ref(), Some(&parsed), "Acl::parse is not deterministic");
}
