//! `clawboard acl check` through the real binary: decisions, the rule that made
//! them, exit codes, and a bad `acl.toml` named by key. (The matrix itself, cell by
//! cell, is tested in `crates/core/src/acl/tests.rs`.)

use clawboard_tests::{Run, Tree, sh_config, wait_until};

fn check(t: &Tree, args: &[&str]) -> Run {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut all = vec!["--config", cfg.to_str().unwrap(), "acl", "check"];
    all.extend_from_slice(args);
    t.run(&all)
}

#[test]
fn acl_check_explains_the_decision_and_exits_by_it() {
    let t = Tree::init();
    t.config("");
    let ok = check(&t, &["--as", "creator-code", "--task", "t1", "--write", "tasks/t1/result.json"]);
    ok.expect_code(0);
    assert!(ok.stdout.starts_with("allowed: creator-code may write \"tasks/t1/result.json\""), "{}", ok.stdout);
    assert!(
        ok.stdout.contains("rule: [dirs.\"tasks/\"] worker = \"W\"") && ok.stdout.contains("inside its own task t1")
    );
    assert!(ok.stdout.contains("acl: the embedded seed matrix"), "{}", ok.stdout);
    let no = check(&t, &["--as", "creator-code", "--task", "t1", "--write", "tasks/t2/result.json"]);
    no.expect_code(1);
    assert!(no.stdout.contains("refused") && no.stdout.contains("outside its own task tasks/t1/"), "{}", no.stdout);
    let risk = check(&t, &["--as", "gm", "--write", "shared/risk-limits.json", "--json"]);
    risk.expect_code(1);
    let v = risk.json();
    assert_eq!(v["decision"]["allowed"], false);
    assert_eq!(v["decision"]["rule"], "[files.\"shared/risk-limits.json\"] gm = \"R\"");
    check(&t, &["--as", "human", "--write", "shared/risk-limits.json"]).expect_code(0);
    let climb = check(&t, &["--as", "gm", "--read", "../../etc/passwd"]);
    climb.expect_code(1);
    assert!(climb.stdout.contains("climbs out with .."), "{}", climb.stdout);
    check(&t, &["--as", "gm", "tasks/t1/task.json"]).expect_code(2);
}

#[test]
fn an_acl_beside_the_config_is_used_and_a_bad_one_is_named() {
    let t = Tree::init();
    t.config("");
    let acl = t.dir.path().join("acl.toml");
    let text = clawboard_core::acl::DEFAULT_ACL.replacen("assistant = \"R\"", "assistant = \"RW\"", 1);
    std::fs::write(&acl, &text).unwrap();
    let r = check(&t, &["--as", "assistant", "--write", "tasks/t1/x.json"]);
    r.expect_code(0);
    assert!(r.stdout.contains(&format!("acl: {}", acl.display())), "{}", r.stdout);
    std::fs::write(&acl, text.replacen("gm = \"RW\"", "gm = \"rw\"", 1)).unwrap();
    let bad = check(&t, &["--as", "gm", "--read", "tasks/t1/x.json"]);
    bad.expect_code(2);
    assert!(
        bad.stderr.contains(&format!("{}: dirs.\"tasks/\".gm: \"rw\" is not one of", acl.display())),
        "{}",
        bad.stderr
    );
    // Keys that could never match: refused, not silently dead.
    for (edit, want) in [
        (
            clawboard_core::acl::DEFAULT_ACL.replace("[dirs.\"gm/\"]", "[dirs.\"gm//\"]"),
            "dirs.\"gm//\": is not a relative directory ending in /: the path has an empty component (//)",
        ),
        (
            format!(
                "{}\n[dirs.\"tasks/*/notes/\"]\nassistant=\"-\"\ngm=\"-\"\nvalidator=\"-\"\nplatform-pm=\"-\"\npm=\"-\"\nworker=\"-\"\n",
                clawboard_core::acl::DEFAULT_ACL
            ),
            "dirs.\"tasks/*/notes/\": contains '*': rules are literal",
        ),
        (
            clawboard_core::acl::DEFAULT_ACL.replacen("control = \"-\"\nerrors = \"A\"", "control = \"-\"", 1),
            "zones.worker: has no cell for errors; write \"-\" to deny",
        ),
    ] {
        std::fs::write(&acl, edit).unwrap();
        let bad = check(&t, &["--as", "gm", "--write", "gm/x.md"]);
        bad.expect_code(2);
        assert!(bad.stderr.contains(&format!("{}: {want}", acl.display())), "{want}: {}", bad.stderr);
    }
}

/// A worker that tries a series of writes through `clawboard write` while it runs and
/// reports each exit code; then the test replays its token after it ended.
#[test]
fn roles_write_through_the_daemon_under_the_acl_with_their_instance_token() {
    let t = Tree::init();
    let bin = clawboard_tests::bin();
    let w = |path: &str, body: &str| {
        format!("printf '{body}' | {} write {path} >/dev/null 2>>$d/err.log; c=\\\"$c $?\\\"; ", bin.display())
    };
    // Bodies with quotes come from files, to keep the shell quoting sane.
    let bodies = t.dir.path().join("bodies");
    std::fs::create_dir_all(&bodies).unwrap();
    // (One that needs approval would hold the task: tests/tests/review.rs tests that.)
    let raise =
        r#"{"level":"high","from":"someone-else","issue":"need a key","requiresHumanApproval":false,"taskId":"t9"}"#;
    let approve = r#"{"level":"high","from":"w","issue":"x","decision":"approved","decidedBy":"human","decidedAt":"2026-11-21T10:00:00Z"}"#;
    std::fs::write(bodies.join("raise.json"), raise).unwrap();
    std::fs::write(bodies.join("approve.json"), approve).unwrap();
    let wf = |path: &str, file: &str| {
        format!(
            "{} write {path} < {} >/dev/null 2>>$d/err.log; c=\\\"$c $?\\\"; ",
            bin.display(),
            bodies.join(file).display()
        )
    };
    let script = format!(
        "d=$CLAWBOARD_ROOT/tasks/$CLAWBOARD_TASK_ID; cat >/dev/null; c=; {}{}{}{}{}{}{}{}{}{}{}printf '%s' $CLAWBOARD_TOKEN > $d/token.txt; printf '{{\\\"summary\\\":\\\"codes%s\\\"}}' \\\"$c\\\"",
        w("tasks/$CLAWBOARD_TASK_ID/notes.md", "mine"),
        w("tasks/other/x.md", "not mine"),
        w("../../outside.txt", "out"),
        w("shared/risk-limits.json", "{{}}"),
        w("gm/decisions.md", "forged"),
        w("escalations/e1.json", "[1]"),
        w("tasks/$CLAWBOARD_TASK_ID/validation.json", "{{}}"),
        wf("escalations/e2.json", "approve.json"),
        wf("escalations/e3.json", "raise.json"),
        wf("escalations/e3.json", "raise.json"),
        "c=\\\"$c $(printf x | CLAWBOARD_TOKEN=0000 ".to_owned()
            + &format!(
                "{} write tasks/$CLAWBOARD_TASK_ID/forged.md >/dev/null 2>>$d/err.log; echo $?)\\\"; ",
                bin.display()
            ),
    );
    let cfg = sh_config("").replace(
        "[roles.w]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; printf '{\\\"summary\\\":\\\"w did it\\\"}'\"]",
        &format!("[roles.w]\ncommand = [\"sh\", \"-c\", \"{script}\"]"),
    );
    assert!(cfg.contains("token.txt"), "the worker was replaced:\n{cfg}");
    t.config(&cfg);
    let risk_before = std::fs::read(t.root.join("shared/risk-limits.json")).unwrap();
    let decisions_before = std::fs::read(t.root.join("gm/decisions.md")).unwrap();
    let d = t.daemon();
    t.drop_task("t1.json", r#"{"taskId":"t1","type":"coding","description":"write things"}"#);
    wait_until(30, "the task to end", || matches!(t.status_of("t1").as_str(), "completed" | "failed"));
    let result = std::fs::read_to_string(t.root.join("tasks/t1/result.json")).unwrap();
    // own task: 0; another task, ../.., risk-limits, gm/, an invalid escalation: 2; the
    // lifecycle's own validation.json: 2; a self-approved escalation: 2; a new
    // escalation: 0; the same again: 2; a forged token: 2.
    assert!(
        result.contains("codes 0 2 2 2 2 2 2 2 0 2 2"),
        "{result}\n{}",
        std::fs::read_to_string(t.root.join("tasks/t1/err.log")).unwrap_or_default()
    );
    assert_eq!(std::fs::read_to_string(t.root.join("tasks/t1/notes.md")).unwrap(), "mine");
    let err = std::fs::read_to_string(t.root.join("tasks/t1/err.log")).unwrap();
    for want in [
        "outside its own task tasks/t1/",
        "climbs out with ..",
        "rule: [files.\"shared/risk-limits.json\"] worker = \"R\"",
        "rule: [dirs.\"gm/\"] worker = \"-\"",
        "refused: escalations/e1.json: /",
        "unknown or expired token",
        "tasks/t1/validation.json is written by the task's lifecycle only",
        "decision, decidedBy and decidedAt are a human's to write",
        "escalations/e3.json exists: an escalation is raised once",
    ] {
        assert!(err.contains(want), "missing {want:?} in\n{err}");
    }
    assert!(!t.root.join("tasks/other").exists() && !t.dir.path().join("outside.txt").exists());
    assert!(!t.root.join("escalations/e1.json").exists() && !t.root.join("tasks/t1/forged.md").exists());
    assert!(!t.root.join("escalations/e2.json").exists(), "no self-approval");
    let e3: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("escalations/e3.json")).unwrap()).unwrap();
    assert_eq!(
        (e3["from"].as_str(), e3["taskId"].as_str()),
        (Some("w"), Some("t1")),
        "the daemon says who raised it: {e3}"
    );
    assert_eq!(std::fs::read(t.root.join("shared/risk-limits.json")).unwrap(), risk_before);
    assert_eq!(std::fs::read(t.root.join("gm/decisions.md")).unwrap(), decisions_before);
    // The instance ended: its token no longer works.
    let token = std::fs::read_to_string(t.root.join("tasks/t1/token.txt")).unwrap();
    assert_eq!(token.len(), 32, "128 bits as hex");
    let late = t.run_with_stdin(&["write", "--token", &token, "tasks/t1/late.md"], b"too late");
    late.expect_code(2);
    assert!(late.stderr.contains("unknown or expired token"), "{}", late.stderr);
    let m = t.run(&["status", "--json"]);
    m.ok();
    let metrics = clawboard_tests::review::unix_get(&t, "/metrics");
    assert!(
        metrics.contains("clawboard_acl_refusals_total 8"),
        "4 ACL/path + validation.json + self-approval + 2 bad tokens:
{metrics}"
    );
    assert_eq!(d.stop(), 0);
}
