//! The CLI end to end, through the real binary.

use clawboard_tests::{Tree, repo};

#[test]
fn init_creates_the_seed_layout_and_is_idempotent() {
    let t = Tree::new();
    let first = t.run(&["init"]);
    first.ok();
    assert!(first.stdout.contains("Initialized the blackboard"), "{}", first.stdout);
    for dir in [
        "tasks",
        "gm",
        "roles",
        "escalations",
        "shared",
        "harvest/daily",
        "harvest/weekly",
        "reports/daily",
        "reports/weekly",
        "reports/monthly",
        "entries",
        "inbox",
        ".clawboard",
    ] {
        assert!(t.root.join(dir).is_dir(), "missing {dir}/");
    }
    // Every JSON file init writes is valid as its kind.
    let files = [
        "roles/active.json",
        "roles/memory-queue.json",
        "shared/risk-limits.json",
        "shared/node-status.json",
        "shared/knowledge-sync.json",
        "gm/pm-performance.json",
    ];
    let paths: Vec<String> = files.iter().map(|f| t.root.join(f).display().to_string()).collect();
    let mut args = vec!["validate"];
    args.extend(paths.iter().map(String::as_str));
    t.run(&args).ok();
    for md in ["gm/decisions.md", "gm/arbitrations.md"] {
        assert!(t.root.join(md).is_file(), "missing {md}");
    }

    let before = t.snapshot();
    let second = t.run(&["init"]);
    second.ok();
    assert!(second.stdout.starts_with("Nothing to do"), "{}", second.stdout);
    assert_eq!(t.snapshot(), before, "a second init changed the tree");
}

#[test]
fn init_restores_what_is_missing_and_keeps_what_exists() {
    let t = Tree::init();
    std::fs::write(t.root.join("gm/decisions.md"), "# mine\n").unwrap();
    std::fs::remove_file(t.root.join("roles/active.json")).unwrap();
    let r = t.run(&["init", "--json"]);
    r.ok();
    assert_eq!(r.json()["created"], serde_json::json!(["roles/active.json"]));
    assert_eq!(std::fs::read_to_string(t.root.join("gm/decisions.md")).unwrap(), "# mine\n");
}

/// A root init cannot make a tree of is refused before anything is made: a file
/// where a directory of the layout goes, a link to nowhere. A directory of
/// someone else's it may not read does not stop it.
#[test]
fn init_refuses_a_root_in_the_way_before_making_anything() {
    let t = Tree::new();
    std::fs::create_dir_all(&t.root).unwrap();
    std::fs::write(t.root.join("inbox"), "a file of mine").unwrap();
    let r = t.run(&["init"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("inbox") && r.stderr.contains("is in the way: the tree needs a directory inbox/ there"),
        "{}",
        r.stderr
    );
    let left: Vec<_> = std::fs::read_dir(&t.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["inbox"], "nothing was made");

    // A directory of other things: made a tree, and said so.
    std::fs::remove_file(t.root.join("inbox")).unwrap();
    std::fs::write(t.root.join("notes.txt"), "mine").unwrap();
    let r = t.run(&["init"]);
    r.ok();
    assert!(r.stdout.contains("was not a blackboard and already held notes.txt; left as they are"), "{}", r.stdout);
    assert_eq!(std::fs::read_to_string(t.root.join("notes.txt")).unwrap(), "mine");
    let again = t.run(&["init"]);
    assert!(!again.stdout.contains("was not a blackboard"), "{}", again.stdout);

    let dangling = t.dir.path().join("nowhere-link");
    std::os::unix::fs::symlink(t.dir.path().join("nowhere"), &dangling).unwrap();
    let r = t.command_no_root(&["--root", dangling.to_str().unwrap(), "init"]).output().unwrap();
    let r = clawboard_tests::Run::from(r);
    r.expect_code(2);
    assert!(r.stderr.contains("is a symbolic link to") && r.stderr.contains("which does not exist"), "{}", r.stderr);
}

#[test]
fn submit_then_list_shows_the_task() {
    let t = Tree::init();
    let example = repo().join("config/examples/task.json");
    let sub = t.run(&["task", "submit", example.to_str().unwrap()]);
    sub.ok();
    let id = sub.stdout.split_whitespace().nth(1).unwrap().to_owned();
    assert!(id.starts_with("task-"), "{}", sub.stdout);

    let list = t.run(&["task", "list"]);
    list.ok();
    assert!(list.stdout.starts_with("ID "), "{}", list.stdout);
    assert!(list.stdout.contains(&id) && list.stdout.contains("pending"), "{}", list.stdout);

    let stored = t.root.join("tasks").join(&id).join("task.json");
    let task: serde_json::Value = serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    assert_eq!(task["taskId"], id.as_str());
    assert_eq!(task["status"], "pending");
    assert_eq!(task["createdBy"], "assistant", "a given createdBy is kept");
    assert!(task["createdAt"].as_str().unwrap().ends_with('Z'));
    // The stored file is itself valid as a task at its path.
    t.run(&["validate", stored.to_str().unwrap()]).ok();

    let json = t.run(&["task", "list", "--json"]);
    assert_eq!(json.json()[0]["taskId"], id.as_str());
    let show = t.run(&["task", "show", &id, "--json"]);
    show.ok();
    assert_eq!(show.json()["files"], serde_json::json!(["task.json"]));
    let human = t.run(&["task", "show", &id]);
    assert!(human.ok().stdout.contains("assignedPM:  coding-pm"), "{}", human.stdout);
}

#[test]
fn submit_from_stdin_fills_in_defaults() {
    let t = Tree::init();
    let r = t.run_with_stdin(
        &["task", "submit", "-", "--json"],
        br#"{"taskId":"t-stdin","type":"research","description":"Compare X and Y"}"#,
    );
    r.ok();
    let task = r.json();
    assert_eq!(task["taskId"], "t-stdin");
    assert_eq!(task["priority"], "normal");
    assert_eq!(task["createdBy"], "human");
    assert!(t.root.join("tasks/t-stdin/task.json").is_file());
}

#[test]
fn duplicate_task_id_is_refused_and_changes_nothing() {
    let t = Tree::init();
    let body = br#"{"taskId":"dup-1","type":"quant","description":"first"}"#;
    t.run_with_stdin(&["task", "submit", "-"], body).ok();
    let before = t.snapshot();
    let again =
        t.run_with_stdin(&["task", "submit", "-"], br#"{"taskId":"dup-1","type":"quant","description":"second"}"#);
    again.expect_code(2);
    assert!(again.stderr.contains("/taskId: task \"dup-1\" already exists"), "{}", again.stderr);
    assert_eq!(t.snapshot(), before);
}

/// `task list` shows the newest N that match and says how many more there are;
/// a `--since` that is neither a time nor an age is refused, naming the flag.
#[test]
fn list_pages_the_newest_and_refuses_a_bad_since() {
    let t = Tree::init();
    for (id, day) in [("p1", "01"), ("p2", "02"), ("p3", "03")] {
        let body = format!(
            r#"{{"taskId":"{id}","type":"coding","description":"{id}","createdAt":"2026-11-{day}T00:00:00Z"}}"#
        );
        t.run_with_stdin(&["task", "submit", "-"], body.as_bytes()).ok();
    }
    let page = t.run(&["task", "list", "--limit", "2"]);
    let out = &page.ok().stdout;
    assert!(out.contains("p2") && out.contains("p3") && !out.contains("p1 "), "{out}");
    assert!(out.contains("The newest 2 of 3 tasks"), "{out}");
    let since = t.run(&["task", "list", "--since", "2026-11-02", "--json"]).json();
    let ids: Vec<&str> = since.as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["p2", "p3"]);
    assert_eq!(t.run(&["task", "list", "--all", "--json"]).json().as_array().unwrap().len(), 3);
    let before = t.snapshot();
    let bad = t.run(&["task", "list", "--since", "last tuesday"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("--since") && bad.stderr.contains("is not a time"), "{}", bad.stderr);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn list_filters_by_status_and_type() {
    let t = Tree::init();
    t.run_with_stdin(&["task", "submit", "-"], br#"{"taskId":"a1","type":"coding","description":"a"}"#).ok();
    t.run_with_stdin(&["task", "submit", "-"], br#"{"taskId":"b1","type":"writing","description":"b"}"#).ok();
    let coding = t.run(&["task", "list", "--type", "coding", "--json"]);
    let ids: Vec<_> =
        coding.json().as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, vec!["a1"]);
    let running = t.run(&["task", "list", "--status", "running"]);
    assert_eq!(running.ok().stdout.trim(), "No tasks.");
    let bad = t.run(&["task", "list", "--status", "urgent"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("\"urgent\" is not one of pending, running, completed, failed"), "{}", bad.stderr);
}

#[test]
fn validate_accepts_every_seed_example() {
    let t = Tree::new();
    let tree = repo().join("tests/fixtures/seed-tree");
    let files: Vec<String> = walk(&tree).into_iter().map(|p| p.display().to_string()).collect();
    assert!(files.len() >= 14);
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let r = t.run(&args);
    r.ok();
    assert!(r.stdout.contains(&format!("{} checked, {} valid, 0 invalid", files.len(), files.len())), "{}", r.stdout);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

#[test]
fn validate_reports_every_problem_with_file_and_pointer() {
    let t = Tree::new();
    let dir = t.dir.path().join("tasks/t1");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("task.json");
    std::fs::write(
        &file,
        r#"{"taskId":"t2","type":"coding","priority":"urgent","createdBy":"x","createdAt":"now","status":"pending"}"#,
    )
    .unwrap();
    let r = t.run(&["validate", file.to_str().unwrap()]);
    r.expect_code(2);
    let f = file.display();
    assert!(r.stdout.contains(&format!("{f}: /description: is required but missing")), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("{f}: /priority: \"urgent\" is not one of high, normal, low")), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("{f}: /createdAt: \"now\" is not an RFC 3339 timestamp")), "{}", r.stdout);

    let json = t.run(&["validate", "--json", file.to_str().unwrap()]);
    json.expect_code(2);
    assert_eq!(json.json()[0]["problems"].as_array().unwrap().len(), 3);

    // With the schema satisfied, the path rule still applies.
    std::fs::write(&file, r#"{"taskId":"t2","type":"coding","description":"d","priority":"low","createdBy":"x","createdAt":"2026-01-01T00:00:00Z","status":"pending"}"#).unwrap();
    let r = t.run(&["validate", file.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stdout.contains("/taskId: \"t2\" does not match its directory tasks/t1/"), "{}", r.stdout);
}

#[test]
fn validate_with_kind_and_unknown_paths() {
    let t = Tree::new();
    let f = t.scratch("draft.json", br#"{"level":"urgent","from":"me","issue":"x"}"#);
    let r = t.run(&["validate", "--kind", "escalation", f.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stdout.contains("/level: \"urgent\" is not one of critical, high, normal"), "{}", r.stdout);
    let r = t.run(&["validate", f.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stdout.contains("cannot tell the kind of file from its path; pass --kind"), "{}", r.stdout);
    let r = t.run(&["validate", "--kind", "bogus", f.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("unknown kind \"bogus\""), "{}", r.stderr);
    // A path that cannot be checked is that path's problem; the others are still checked.
    let good = t.scratch("ok.json", br#"{"level":"high","from":"me","issue":"x"}"#);
    let missing = t.dir.path().join("gone.json");
    let r = t.run(&[
        "validate",
        "--kind",
        "escalation",
        t.dir.path().to_str().unwrap(),
        missing.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    r.expect_code(2);
    assert!(r.stdout.contains(&format!("{}: ok (escalation)", good.display())), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("{}: /: cannot be read: No such file", missing.display())), "{}", r.stdout);
    assert!(r.stdout.contains("Is a directory"), "the reason is given: {}", r.stdout);
    assert!(r.stdout.contains("3 checked, 1 valid, 2 invalid"), "{}", r.stdout);
    // A bad status names every status there is.
    let seed = std::fs::read_to_string(
        repo().join("tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"),
    )
    .unwrap();
    let mut e: serde_json::Value = serde_json::from_str(&seed).unwrap();
    e["status"] = "bogus".into();
    let bogus = t.scratch("bogus.json", e.to_string().as_bytes());
    let r = t.run(&["validate", "--kind", "entry", bogus.to_str().unwrap()]);
    r.expect_code(2);
    assert!(
        r.stdout.contains("/status: \"bogus\" is not one of open, in_progress, done, error, canceled"),
        "{}",
        r.stdout
    );
}

#[test]
fn exit_codes_follow_the_readme() {
    let t = Tree::new();
    t.run(&["no-such-command"]).expect_code(2);
    let r = t.run(&["status"]);
    r.expect_code(1);
    assert!(r.stderr.contains("not a clawboard tree") && r.stderr.contains("clawboard init"), "{}", r.stderr);
    t.run(&["init"]).ok();
    let r = t.run(&["task", "show", "nope"]);
    r.expect_code(2);
    assert!(r.stderr.contains("no task nope"), "{}", r.stderr);
    let r = t.run(&["task", "show", "../etc"]);
    r.expect_code(2);
    assert!(r.stderr.contains("contains a path separator"), "{}", r.stderr);
    t.run(&["--help"]).ok();
    t.run(&["--version"]).ok();
}

#[test]
fn status_counts_tasks() {
    let t = Tree::init();
    t.run_with_stdin(&["task", "submit", "-"], br#"{"type":"coding","description":"a"}"#).ok();
    let r = t.run(&["status", "--json"]);
    let s = r.json();
    assert_eq!(s["tasks"]["pending"], 1);
    assert_eq!(s["missing"], serde_json::json!([]));
    let human = t.run(&["status"]);
    assert!(human.ok().stdout.contains("tasks        1 pending, 0 running, 0 completed, 0 failed"), "{}", human.stdout);
}

#[test]
fn root_comes_from_env_then_config_file() {
    let t = Tree::new();
    let cfg = t.scratch("c.toml", format!("root = {:?}\n", t.root.join("from-file").display().to_string()).as_bytes());
    let env_root = t.root.join("from-env");
    let mut c = t.command_no_root(&["--config", cfg.to_str().unwrap(), "init"]);
    assert!(c.env("CLAWBOARD_ROOT", &env_root).status().unwrap().success());
    assert!(env_root.join(".clawboard").is_dir());
    let mut c = t.command_no_root(&["init"]);
    assert!(c.env("CLAWBOARD_CONFIG", &cfg).status().unwrap().success());
    assert!(t.root.join("from-file/.clawboard").is_dir());

    let bad = t.scratch("bad.toml", b"[limits]\nmax_file_size = \"big\"\n");
    let out = t.command_no_root(&["--config", bad.to_str().unwrap(), "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("key limits.max_file_size"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn size_limit_is_configurable() {
    let t = Tree::init();
    let body = br#"{"type":"coding","description":"a description long enough to pass 64 bytes...."}"#;
    let mut c = t.command(&["task", "submit", "-"]);
    c.env("CLAWBOARD_MAX_FILE_SIZE", "64");
    let out = {
        use std::io::Write;
        let mut child = c.stdin(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(body);
        child.wait_with_output().unwrap()
    };
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("over the 64 bytes limit"));
}

#[test]
fn json_logs_and_verbosity() {
    let t = Tree::init();
    let r = t.run(&["-v", "--log-format", "json", "status"]);
    r.ok();
    let line = r.stderr.lines().find(|l| l.contains("opened the blackboard")).unwrap_or_else(|| panic!("{}", r.stderr));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["level"], "DEBUG");
    let quiet = t.run(&["status"]);
    assert!(quiet.stderr.is_empty(), "{}", quiet.stderr);
}

#[test]
fn completions_and_man_page() {
    let t = Tree::new();
    let bash = t.run(&["completions", "bash"]);
    assert!(bash.ok().stdout.contains("_clawboard()"), "{}", bash.stdout);
    t.run(&["completions", "zsh"]).ok();
    let man = t.run(&["man"]);
    assert!(man.ok().stdout.contains(".TH clawboard 1"), "{}", &man.stdout[..200.min(man.stdout.len())]);
    let dir = t.dir.path().join("man");
    t.run(&["man", "--dir", dir.to_str().unwrap()]).ok();
    assert!(dir.join("clawboard-task-submit.1").is_file());
}

/// A reader that stops early (`clawboard completions bash | head -1`) ends the
/// command quietly: exit 0, nothing on stderr, no panic.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let t = Tree::init();
    // The completion script (over 100 KB) fills the pipe: the write fails for sure.
    // `status` writes less than a pipe holds: closed before it starts, it fails too.
    for args in [&["completions", "bash"][..], &["status"], &["task", "list"]] {
        let mut child = t
            .command(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn every_help_has_an_example() {
    let t = Tree::new();
    for args in [
        vec!["--help"],
        vec!["init", "--help"],
        vec!["validate", "--help"],
        vec!["task", "--help"],
        vec!["task", "submit", "--help"],
        vec!["task", "list", "--help"],
        vec!["task", "show", "--help"],
        vec!["status", "--help"],
        vec!["demo", "--help"],
        vec!["completions", "--help"],
        vec!["man", "--help"],
    ] {
        let r = t.run(&args);
        assert!(r.ok().stdout.contains("Examples:"), "{args:?}: {}", r.stdout);
    }
}

#[test]
fn sync_push_and_sync_full_say_what_each_does() {
    let t = Tree::new();
    let push = t.run(&["sync", "push", "--help"]);
    let full = t.run(&["sync", "full", "--help"]);
    assert!(push.ok().stdout.starts_with("Push now what changed since the last push"), "{}", push.stdout);
    assert!(full.ok().stdout.starts_with("Push the whole tree, every file"), "{}", full.stdout);
    assert!(full.stdout.contains("Resumable"), "{}", full.stdout);
    assert!(full.stdout.contains("clawboard sync full "), "its own examples: {}", full.stdout);
    let list = t.run(&["sync", "--help"]);
    assert!(list.ok().stdout.contains("full    Push the whole tree"), "{}", list.stdout);
}
