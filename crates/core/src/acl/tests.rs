#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every cell of seed 002's matrix, allowed and refused, against the embedded
//! `config/acl.toml`; then the choices beyond the seed, paths, and bad files.

use super::*;

/// Seed 002, 访问控制, as written there.
const SEED_TABLE: &str = "
| tasks/ | R | RW | R | R | RW | W |
| gm/ | - | RW | - | R | R | - |
| roles/ | - | R | - | RW | R | - |
| escalations/ | R | RW | - | R | W | W |
| shared/ | R | R | R | R | R | R |
| harvest/ | - | R | - | RW | - | - |
";

/// A role id of each principal, in the seed's column order.
const ROLES: [(&str, Principal); 6] = [
    ("assistant", Principal::Assistant),
    ("gm", Principal::Gm),
    ("validator", Principal::Validator),
    ("platform-pm", Principal::PlatformPm),
    ("coding-pm", Principal::Pm),
    ("creator-code", Principal::Worker),
];

#[test]
fn every_cell_of_the_seed_matrix_is_allowed_or_refused_as_written() {
    let acl = Acl::seed().unwrap();
    let mut checked = 0;
    for line in SEED_TABLE.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let dir = cells[0];
        for (i, (role, principal)) in ROLES.iter().enumerate() {
            let cell = cells[i + 1];
            // A worker works inside its own task: give it one, and a path inside it.
            let (task, path) = if dir == "tasks/" {
                (Some("t1"), "tasks/t1/result.json".to_owned())
            } else {
                (Some("t1"), format!("{dir}some/file.json"))
            };
            for op in [Op::Read, Op::Write] {
                let want = cell.contains(op.letter());
                let d = acl.check(role, task, op, &path);
                assert_eq!(d.principal, *principal, "{role}");
                assert_eq!(d.allowed, want, "{dir} {role} {op:?}: cell {cell:?}: {d:?}");
                assert!(d.rule.starts_with(&format!("[dirs.{dir:?}] {} = ", principal.name())), "{}", d.rule);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * 6 * 2, "every cell, both ways");
}

#[test]
fn a_worker_writes_only_inside_its_own_task() {
    let acl = Acl::seed().unwrap();
    assert!(acl.check("creator-code", Some("t1"), Op::Write, "tasks/t1/attempts/x.json").allowed);
    let other = acl.check("creator-code", Some("t1"), Op::Write, "tasks/t2/result.json");
    assert!(!other.allowed && other.rule == "[scope] own_task_only = [\"worker\"]", "{other:?}");
    assert!(other.why.last().unwrap().contains("outside its own task tasks/t1/"), "{other:?}");
    assert!(!acl.check("creator-code", None, Op::Write, "tasks/t1/result.json").allowed, "no task, no own task");
    assert!(!acl.check("creator-code", Some("t1"), Op::Write, "tasks/t1").allowed, "the directory itself");
    assert!(!acl.check("creator-code", Some("t1"), Op::Write, "tasks/t10/x").allowed, "a prefix is not the task");
    // A PM's RW on tasks/ is not scoped (the seed gives it the whole directory).
    assert!(acl.check("coding-pm", Some("t1"), Op::Write, "tasks/t2/team-composition.json").allowed);
}

#[test]
fn choices_beyond_the_seed() {
    let acl = Acl::seed().unwrap();
    // shared/risk-limits.json: written by human only.
    for (role, _) in ROLES {
        let d = acl.check(role, None, Op::Write, "shared/risk-limits.json");
        assert!(!d.allowed && d.rule.starts_with("[files.\"shared/risk-limits.json\"]"), "{role}: {d:?}");
        assert!(acl.check(role, None, Op::Read, "shared/risk-limits.json").allowed, "{role}");
    }
    for who in ["human", "daemon"] {
        for op in [Op::Read, Op::Write] {
            for path in ["shared/risk-limits.json", "tasks/t9/x", "gm/decisions.md", "anything/else"] {
                assert!(acl.check(who, None, op, path).allowed, "{who} {op:?} {path}");
            }
        }
    }
    // reports/ and inbox/.
    assert!(acl.check("gm", None, Op::Read, "reports/daily/2026-11-21.md").allowed);
    assert!(!acl.check("gm", None, Op::Write, "reports/daily/2026-11-21.md").allowed);
    assert!(!acl.check("creator-code", None, Op::Read, "reports/daily/2026-11-21.md").allowed);
    assert!(acl.check("assistant", None, Op::Write, "inbox/t.json").allowed);
    assert!(!acl.check("assistant", None, Op::Read, "inbox/t.json").allowed);
    assert!(!acl.check("creator-code", Some("t1"), Op::Write, "inbox/t.json").allowed);
    // Anything no entry covers is denied.
    let d = acl.check("gm", None, Op::Read, "elsewhere/x");
    assert!(!d.allowed && d.rule == "default deny", "{d:?}");
}

#[test]
fn hostile_paths_are_refused_before_any_rule() {
    let acl = Acl::seed().unwrap();
    for (path, why) in [
        ("../../etc/passwd", "climbs out"),
        ("tasks/t1/../../gm/decisions.md", "climbs out"),
        ("/etc/passwd", "absolute"),
        ("tasks/t1/a\0b", "NUL"),
        ("", "empty"),
        ("tasks/./t1/x", ". component"),
        (".clawboard/journal/1", "daemon's own state"),
        ("tasks\\t1\\x", "backslash"),
        ("shared/risk-limits.json/", "ends in /"),
        ("shared//risk-limits.json", "empty component"),
        ("tasks//t2/x", "empty component"),
    ] {
        for who in ["creator-code", "gm", "human"] {
            let d = acl.check(who, Some("t1"), Op::Write, path);
            assert!(!d.allowed, "{who} {path:?}");
            assert!(d.why.last().unwrap().contains(why), "{path:?}: {d:?}");
        }
    }
}

#[test]
fn a_role_instance_is_never_human_or_daemon() {
    let acl = Acl::seed().unwrap();
    for id in ["human", "daemon"] {
        let d = acl.check_instance(id, "t1", Op::Write, "shared/risk-limits.json");
        assert!(!d.allowed && d.principal == Principal::Worker, "{id}: {d:?}");
        assert!(d.why[0].contains("never"), "{d:?}");
    }
    assert!(acl.check_instance("creator-code", "t1", Op::Write, "tasks/t1/x.md").allowed);
}

#[test]
fn roles_map_to_principals_by_id() {
    for (role, p) in [
        ("gm", Principal::Gm),
        ("platform-pm", Principal::PlatformPm),
        ("quant-pm", Principal::Pm),
        ("pm", Principal::Pm),
        ("validator", Principal::Validator),
        ("assistant", Principal::Assistant),
        ("creator-code", Principal::Worker),
        ("pmx", Principal::Worker),
        ("human", Principal::Human),
    ] {
        assert_eq!(Principal::of_role(role).0, p, "{role}");
    }
}

/// A row with every role principal's cell.
const ROW: &str = "assistant = \"-\"\ngm = \"-\"\nvalidator = \"-\"\nplatform-pm = \"-\"\npm = \"-\"\nworker = \"-\"\n";

#[test]
fn a_bad_file_names_the_key() {
    let good = DEFAULT_ACL;
    for (edit, key, reason) in [
        (good.replacen("worker = \"W\"", "worker = \"X\"", 1), "dirs.\"tasks/\".worker", "not one of"),
        (good.replacen("worker = \"W\"", "robot = \"W\"", 1), "dirs.\"tasks/\".robot", "unknown principal"),
        (good.replacen("worker = \"W\"\n", "", 1), "dirs.\"tasks/\"", "has no cell for worker"),
        (good.replace("[dirs.\"gm/\"]", "[dirs.\"gm\"]"), "dirs.\"gm\"", "ending in /"),
        (good.replace("[dirs.\"gm/\"]", "[dirs.\"../gm/\"]"), "dirs.\"../gm/\"", "ending in /"),
        (good.replace("[dirs.\"gm/\"]", "[dirs.\"gm//\"]"), "dirs.\"gm//\"", "an empty component (//)"),
        (good.replace("[dirs.\"gm/\"]", "[dirs.\"/\"]"), "dirs.\"/\"", "the path is empty"),
        (
            format!("{good}\n[dirs.\"tasks/*/notes/\"]\n{ROW}"),
            "dirs.\"tasks/*/notes/\"",
            "contains '*': rules are literal",
        ),
        (format!("{good}\n[dirs.\"tasks/t?/\"]\n{ROW}"), "dirs.\"tasks/t?/\"", "contains '?'"),
        (format!("{good}\n[files.\"tasks/*/result.json\"]\n{ROW}"), "files.\"tasks/*/result.json\"", "contains '*'"),
        (
            good.replacen("control = \"-\"\nerrors = \"A\"", "control = \"-\"", 1),
            "zones.",
            "has no cell for errors; write \"-\" to deny",
        ),
        (
            good.replace("own_task_only = [\"worker\"]", "own_task_only = [\"human\"]"),
            "scope.own_task_only",
            "not a role principal",
        ),
        (format!("{good}\n[extra]\nx = 1\n"), "line", "unknown field"),
        (
            good.replacen("worker = \"W\"", "worker = \"W\"\nhuman = \"R\"", 1),
            "dirs.\"tasks/\".human",
            "always do anything",
        ),
    ] {
        let e = Acl::parse("/etc/clawboard/acl.toml", &edit).unwrap_err();
        assert_eq!(e.file, "/etc/clawboard/acl.toml");
        assert!(e.key.starts_with(key) && e.reason.contains(reason), "{key}: {e}");
    }
}
