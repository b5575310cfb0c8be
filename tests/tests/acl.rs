//! `clawboard acl check` through the real binary: decisions, the rule that made
//! them, exit codes, and a bad `acl.toml` named by key. (The matrix itself, cell by
//! cell, is tested in `crates/core/src/acl/tests.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use clawboard_tests::{Run, Tree};

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
}
