//! The task board through a real daemon with real role processes: every cell of
//! seed 000's zone table tried by a role of each component type with its token
//! (`clawboard board … --token`), a title worker that reads only its slice and
//! writes its content through the API, the history, the slice ledger with counted
//! tokens and the role's usage, the totals in result.json and status.md, metrics,
//! and the CLI a person uses on the same board.

use clawboard_tests::{LIFECYCLE_HEAD, Tree, bin, repo, sh_config, wait_until};
use serde_json::Value;

/// Seed 000, Zone 访问权限, as written there ("R (via slice)" is no direct read).
const ZONE_TABLE: &str = "
| orchestrator | R/W | R | R/W | A |
| worker | R (via slice) | W | - | A |
| skill | R (via slice) | R/W | R | A |
| middleware | R | R/W | R/W | A |
| slicer | R | R | R | - |
";

fn config() -> String {
    let probe = repo().join("scripts/roles/board_probe.py");
    let exe = bin();
    let role = |id: &str, component: &str, extra: &str| {
        format!(
            "[roles.{id}]\ncommand = [\"python3\", \"{}\"]\ncomponent = \"{component}\"\nretry_backoff = \"10ms\"\nmax_retries = 0\nenv = {{ CLAWBOARD_EXE = \"{}\"{extra} }}\n",
            probe.display(),
            exe.display()
        )
    };
    let mut c = LIFECYCLE_HEAD.to_owned();
    c.push_str(
        r#"
[roles.pm]
command = ["sh", "-c", "cat >/dev/null; printf '{\"team\":[{\"role\":\"title-worker\",\"priority\":1},{\"role\":\"probe-orchestrator\",\"priority\":2},{\"role\":\"probe-worker\",\"priority\":2},{\"role\":\"probe-skill\",\"priority\":2},{\"role\":\"probe-middleware\",\"priority\":2},{\"role\":\"probe-slicer\",\"priority\":2}]}'"]
retry_backoff = "10ms"

[roles.validator]
command = ["sh", "-c", "cat >/dev/null; printf '{\"score\":9,\"pass\":true}'"]

[roles.harvester]
command = ["sh", "-c", "cat >/dev/null; printf '{\"experiences\":[]}'"]
"#,
    );
    for comp in ["orchestrator", "worker", "skill", "middleware", "slicer"] {
        c.push_str(&role(&format!("probe-{comp}"), comp, ""));
    }
    c.push_str(&role("title-worker", "worker", ", PROBE_WRITE_HOOK = \"1\""));
    c.push_str("scope = [\"meta.intent\", \"meta.platform\", \"meta.style\"]\nmax_tokens = 150\n");
    c
}

/// `clawboard ARGS` with more environment, and `stdin` on its standard input.
fn run_env(t: &Tree, args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> clawboard_tests::Run {
    use std::io::Write;
    let mut cmd = t.command(args);
    cmd.envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    clawboard_tests::Run::from(child.wait_with_output().unwrap())
}

/// A task `id` that is there and over (`completed`): a board is a task's, and a
/// daemon leaves an ended task alone.
fn ended_task(t: &Tree, id: &str) {
    let dir = t.root.join("tasks").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let task = serde_json::json!({
        "taskId": id, "type": "coding", "description": "a board to write on", "priority": "normal",
        "createdBy": "human", "createdAt": "2026-11-27T00:00:00Z", "status": "completed",
        "completedAt": "2026-11-27T00:00:01Z"
    });
    std::fs::write(dir.join("task.json"), serde_json::to_string_pretty(&task).unwrap()).unwrap();
}

/// The output a role printed in the task's last ok attempt of `step`.
fn output_of(t: &Tree, task: &str, step: &str) -> Value {
    let a = t.attempts(task).into_iter().rev().find(|a| a["step"] == step && a["status"] == "ok").unwrap();
    let stem = format!("{:04}-{}", a["number"].as_u64().unwrap(), a["role"].as_str().unwrap());
    let file = t.root.join("tasks").join(task).join("attempts").join(format!("{stem}.stdout"));
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

#[test]
fn roles_work_on_the_board_under_the_zone_table() {
    let t = Tree::init();
    t.config(&config());
    let d = t.daemon();
    t.drop_task("b1.json", r#"{"taskId":"b1","type":"coding","description":"Five AI tools that double your output","priority":"normal","createdBy":"human"}"#);
    wait_until(60, "task b1 to end", || matches!(t.status_of("b1").as_str(), "completed" | "failed"));
    assert_eq!(t.status_of("b1"), "completed", "{}", d.output());

    // Every cell, as each component type's role process saw it.
    let mut refusals = 0;
    for line in ZONE_TABLE.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let comp = cells[0];
        let out = output_of(&t, "b1", &format!("iter-1/probe-{comp}"));
        let seen = &out["output"]["cells"];
        for (i, zone) in ["meta", "content", "control"].iter().enumerate() {
            let cell = cells[i + 1];
            let want_r = cell == "R" || cell == "R/W";
            let want_w = cell.contains('W');
            for (op, want) in [("R", want_r), ("W", want_w)] {
                let got = seen[format!("{zone}.{op}")].as_str().unwrap();
                assert_eq!(got, if want { "ok" } else { "refused" }, "{comp} {zone} {op} (cell {cell:?}): {out}");
                refusals += usize::from(!want);
            }
        }
        let want_a = cells[4] == "A";
        assert_eq!(seen["errors.A"], if want_a { "ok" } else { "refused" }, "{comp} append_error");
        refusals += usize::from(!want_a);
        assert_eq!(out["output"]["sawTask"], true, "an unsliced role still gets the whole context");
        assert_eq!(seen["other_task"], "refused", "{comp} read another task's board");
        refusals += 1;
    }

    // The title worker read only its slice and wrote its content through the API.
    let tw = output_of(&t, "b1", "iter-1/title-worker");
    assert_eq!(tw["output"]["sawTask"], false, "a sliced role gets its slice instead of the task: {tw}");
    assert_eq!(tw["output"]["slice"], serde_json::json!({"intent": "Five AI tools that double your output"}));
    assert_eq!(tw["output"]["hookWrite"], "ok");
    // worker: meta R/W, control R/W, content R and another task = 6 more refusals from it.
    refusals += 6;

    // The board: what the history folds to, written by whom.
    let snap = t.run(&["board", "snapshot", "b1", "--json"]);
    snap.ok();
    let board = snap.json();
    assert_eq!(board["meta_zone"]["intent"], "Five AI tools that double your output");
    assert_eq!(board["content_zone"]["hook"]["variants"][0]["score"], 85);
    assert_eq!(board["control_zone"]["step_status"]["iter-1-title-worker"], "completed");
    assert_eq!(board["control_zone"]["step_status"]["harvest"], "completed");
    let hist = t.run(&["board", "history", "b1", "content.hook", "--json"]);
    hist.ok();
    let recs = hist.json()["records"].as_array().unwrap().clone();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["actor"]["role"], "title-worker");
    assert!(recs[0]["actor"]["instance"].as_str().unwrap().starts_with("inst-"));
    assert_eq!(recs[0]["component"], "worker");
    assert_eq!(recs[0]["op"], "write_content");

    // The ledger: the title worker's slice, counted, within budget, with its usage.
    let led = t.run(&["slice", "history", "b1", "--json"]);
    led.ok();
    let led = led.json();
    let e = &led["entries"][0];
    assert_eq!(
        (e["step"].as_str(), e["role"].as_str(), e["outcome"].as_str()),
        (Some("iter-1/title-worker"), Some("title-worker"), Some("ok"))
    );
    let tokens = e["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= 150 && e["budget"] == 150, "{e}");
    assert_eq!(tokens, tw["output"]["sliceTokens"].as_u64().unwrap(), "the ledger counts what was handed over");
    assert_eq!(e["usage"], serde_json::json!({"prompt_tokens": 40, "completion_tokens": 7}));
    assert_eq!(e["missing"], serde_json::json!(["meta.platform", "meta.style"]));
    // The whole board's count, taken while the role ran: the board as it was at
    // the slice's seq, counted again now by `slice preview --at`.
    let seq = e["board_seq"].as_u64().unwrap().to_string();
    let cfg = t.dir.path().join("clawboard.toml");
    let cfg = cfg.to_str().unwrap();
    let then = t.run(&["--config", cfg, "slice", "preview", "b1", "iter-1/title-worker", "--at", &seq, "--json"]);
    then.ok();
    assert_eq!(e["full_tokens"], then.json()["full_board_tokens"], "{e}");
    assert!(e["full_tokens"].as_u64().unwrap() > tokens, "{e}");
    let result: Value = serde_json::from_slice(&std::fs::read(t.root.join("tasks/b1/result.json")).unwrap()).unwrap();
    assert_eq!(result["tokens"]["slices"], 1);
    assert_eq!(result["tokens"]["sliceTokens"], tokens);
    let status = std::fs::read_to_string(t.root.join("tasks/b1/status.md")).unwrap();
    assert!(status.contains(&format!("1 slices handed out, {tokens} tokens")), "{status}");

    // Refusals are counted in /metrics (the socket's).
    let m = clawboard_tests_metrics(&t);
    let line = m.lines().find(|l| l.starts_with("clawboard_board_refusals_total ")).unwrap();
    assert_eq!(line, format!("clawboard_board_refusals_total {refusals}"), "{m}");
    assert!(d.output().contains("board request refused"), "refusals are logged");

    // A token that is not a running instance's is refused, naming why; nothing changes.
    let before = std::fs::read(t.root.join("tasks/b1/board/board.json")).unwrap();
    let forged = t.run(&["board", "set", "b1", "content.x", "1", "--token", "0123456789abcdef0123456789abcdef"]);
    forged.expect_code(2);
    assert!(forged.stderr.contains("unknown or expired token"), "{}", forged.stderr);
    assert_eq!(std::fs::read(t.root.join("tasks/b1/board/board.json")).unwrap(), before);

    // A preview of the title worker's slice at any point of the history.
    let p = t.run(&[
        "--config",
        t.dir.path().join("clawboard.toml").to_str().unwrap(),
        "slice",
        "preview",
        "b1",
        "title-worker",
        "--at",
        "1",
        "--json",
    ]);
    p.ok();
    let p = p.json();
    assert_eq!(p["slice_data"], serde_json::json!({"intent": "Five AI tools that double your output"}));
    assert_eq!(p["budget"], 150);
    assert_eq!(p["board_seq"], 1);
    d.stop();
}

fn clawboard_tests_metrics(t: &Tree) -> String {
    clawboard_tests::review::unix_get(t, "/metrics")
}

#[test]
fn a_person_uses_the_board_from_the_cli_and_bad_input_changes_nothing() {
    let t = Tree::init();
    // No task, no board: nothing is read as empty, nothing is made.
    for args in
        [vec!["board", "get", "t1"], vec!["board", "set", "t1", "meta.intent", "x"], vec!["board", "history", "t1"]]
    {
        let r = t.run(&args);
        r.expect_code(2);
        assert!(r.stderr.contains("there is no task \"t1\" (no tasks/t1/task.json)"), "{args:?}: {}", r.stderr);
    }
    assert!(!t.root.join("tasks/t1").exists());
    ended_task(&t, "t1");
    t.run(&["board", "set", "t1", "meta.intent", "写一篇关于AI的小红书"]).ok();
    t.run(&["board", "set", "t1", "meta.platform", "xiaohongshu"]).ok();
    t.run(&["board", "set", "t1", "content.hook.variants", r#"[{"type":"numeric","content":"5个AI工具","score":85}]"#])
        .ok();
    t.run(&["board", "step-status", "t1", "title", "completed"]).ok();
    t.run(&["board", "append-error", "t1", "--step", "body", "--type", "component_timeout", "--message", "slow"]).ok();
    let got = t.run(&["board", "get", "t1", "meta.platform"]);
    got.ok();
    assert_eq!(got.stdout.trim(), "\"xiaohongshu\"");
    let before = t.snapshot();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for (args, want) in [
        (vec!["board", "set", "t1", "meta.intent", "42"], "task t1: meta.intent: is the number 42, not a string"),
        (vec!["board", "set", "t1", "meta.platform", "myspace"], "\"myspace\" is not one of xiaohongshu"),
        (
            vec!["board", "set", "t1", "metadata.x", "1"],
            "task t1: metadata.x: at position 0: \"metadata\" is not a zone",
        ),
        (vec!["board", "set", "t1", "meta..x", "1"], "task t1: meta..x: at position 5"),
        (vec!["board", "set", "t1", "meta.intent.x", "1"], "meta.intent is a string; it has no key \"x\""),
        (
            vec!["board", "step-status", "t1", "title", "done"],
            "\"done\" is not one of pending, running, completed, failed, skipped",
        ),
        (vec!["board", "get", "../x", "meta"], "not a valid task id"),
        (vec!["board", "slice", "t1", "--scope", "meta.intent,content.x.intent"], "lands on the slice key \"intent\""),
        // Meant as JSON and broken: said, not stored as text.
        (
            vec!["board", "set", "t1", "content.results.x", r#"{"ok": tru}"#],
            "content.results.x: the value is not valid JSON (expected ident",
        ),
        (
            vec!["board", "set", "t1", "meta.intent", r#"{"broken"#],
            "meta.intent: the value is not valid JSON (EOF while parsing",
        ),
        (
            vec!["board", "set", "t1", "meta.intent", &deep],
            "meta.intent: the value is not valid JSON (recursion limit exceeded",
        ),
        (
            vec!["board", "set", "t1", "control.quality_scores.virality", "1e999"],
            "the value is not valid JSON (number out of range",
        ),
    ] {
        let r = t.run(&args);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    assert_eq!(t.snapshot(), before, "a refused request changes nothing");
    let s = t.run(&[
        "board",
        "slice",
        "t1",
        "--scope",
        "meta.intent,content.hook.variants",
        "--max-tokens",
        "200",
        "--json",
    ]);
    s.ok();
    assert_eq!(s.json()["slice"]["variants"][0]["score"], 85);
    let h = t.run(&["board", "history", "t1"]);
    h.ok();
    assert!(
        h.stdout.contains("write_meta") && h.stdout.contains("append_error") && h.stdout.contains("human"),
        "{}",
        h.stdout
    );
    let acl = t.run(&["acl", "check", "--as", "body-worker", "--write", "board:control.retries"]);
    acl.expect_code(1);
    assert!(acl.stdout.contains("rule: [zones.worker] control = \"-\""), "{}", acl.stdout);

    // A role's process without its token is not taken for a person.
    let r = run_env(
        &t,
        &["board", "set", "t1", "control.x", "1"],
        &[("CLAWBOARD_INSTANCE_ID", "inst-abc"), ("CLAWBOARD_TOKEN", "")],
        b"",
    );
    r.expect_code(2);
    assert!(
        r.stderr.contains("CLAWBOARD_TOKEN is empty, but this process runs as role instance inst-abc"),
        "{}",
        r.stderr
    );

    // Bytes that are not text, on standard input: bad input, not a failure.
    let r = run_env(&t, &["board", "set", "t1", "meta.intent", "-"], &[], b"\xff\xfe caf\xe9");
    r.expect_code(2);
    assert!(r.stderr.contains("meta.intent: the value on standard input is not UTF-8 text"), "{}", r.stderr);

    // A board that would grow past the file limit is refused before anything is written.
    let big = format!("\"{}\"", "x".repeat(700 * 1024));
    let limited = [("CLAWBOARD_MAX_FILE_SIZE", "1MiB")];
    run_env(&t, &["board", "set", "t1", "content.big1", "-"], &limited, big.as_bytes()).ok();
    let before = t.snapshot();
    let r = run_env(&t, &["board", "set", "t1", "content.big2", "-"], &limited, big.as_bytes());
    r.expect_code(2);
    assert!(r.stderr.contains("over the 1048576-byte limit of a file (limits.max_file_size)"), "{}", r.stderr);
    assert!(t.snapshot() == before, "the refused write changed the tree");
    // The board still reads, with the first value and without the second.
    let got = run_env(&t, &["board", "get", "t1", "content"], &limited, b"");
    got.ok();
    assert!(
        got.stdout.contains("big1") && !got.stdout.contains("big2"),
        "{}",
        &got.stdout[..200.min(got.stdout.len())]
    );
}

/// Writers killed with `kill -9` at random points of a burst: whatever was
/// acknowledged is on the board, no write is half-applied, and the board is exactly
/// what its history folds to, with no gap in the sequence.
#[test]
fn kill_dash_nine_during_a_burst_of_writes_keeps_the_board_equal_to_its_history() {
    use std::os::unix::process::CommandExt;
    let t = Tree::init();
    ended_task(&t, "k1");
    t.run(&["board", "set", "k1", "meta.intent", "burst"]).ok();
    let acked = t.dir.path().join("acked");
    for (round, wait_ms) in [(0, 400u64), (1, 650), (2, 900)] {
        let mut groups = Vec::new();
        for w in 0..4 {
            let script = format!(
                "for i in $(seq 1 500); do k=w{w}r{round}i$i; \"{bin}\" --root \"{root}\" board set k1 content.burst.$k \"\\\"$k\\\"\" >/dev/null 2>&1 && echo $k >> \"{acked}\"; done",
                bin = bin().display(),
                root = t.root.display(),
                acked = acked.display()
            );
            let child = std::process::Command::new("sh").args(["-c", &script]).process_group(0).spawn().unwrap();
            groups.push(child);
        }
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        for mut c in groups {
            let ok =
                std::process::Command::new("kill").args(["-KILL", "--", &format!("-{}", c.id())]).status().unwrap();
            assert!(ok.success());
            c.wait().unwrap();
        }
    }
    let store = clawboard_core::Store::open(&t.root).unwrap();
    let board = clawboard_board::TaskBoard::new(&store, "k1").unwrap();
    let now = board.load().unwrap();
    let hist = board.history(None).unwrap();
    let seqs: Vec<u64> = hist.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "the history has no gap");
    assert_eq!(now.seq, seqs.len() as u64);
    assert_eq!(board.at(now.seq).unwrap(), now, "the board is what its history folds to");
    // board.json on disk is some earlier or the same fold (a writer may die between
    // its record and board.json), never a half-applied one.
    let on_disk: clawboard_core::formats::BoardFile =
        serde_json::from_slice(&std::fs::read(t.root.join("tasks/k1/board/board.json")).unwrap()).unwrap();
    assert_eq!(board.at(on_disk.seq).unwrap(), on_disk);
    let acked = std::fs::read_to_string(&acked).unwrap_or_default();
    let keys: Vec<&str> = acked.lines().collect();
    assert!(keys.len() > 20, "the burst wrote too little to test anything: {}", keys.len());
    let burst = now.content_zone["burst"].as_object().unwrap();
    for k in &keys {
        assert_eq!(burst.get(*k), Some(&Value::String((*k).to_owned())), "acknowledged write {k} is lost");
    }
    // Every record is a whole write.
    for r in &hist[1..] {
        assert!(r.path.starts_with("content.burst.w") && r.value == Value::String(r.path[14..].to_owned()), "{r:?}");
    }
    // The next write goes on from the last record.
    t.run(&["board", "set", "k1", "meta.topic", "after"]).ok();
    assert_eq!(board.load().unwrap().seq, now.seq + 1);
}

/// `config/examples/board.toml`, as the README runs it (its relative role commands
/// made absolute, since the test does not run from the repository): the example
/// task completes, the analyst is handed its slice and not the task, writes its
/// notes through the API as a worker, and the CLI shows the board, its history and
/// the slice ledger.
#[test]
fn the_board_example_config_runs_as_the_readme_shows() {
    let t = Tree::init();
    let example = std::fs::read_to_string(repo().join("config/examples/board.toml")).unwrap();
    t.config(&example.replace("\"scripts/roles/", &format!("\"{}/scripts/roles/", repo().display())));
    let d = t.daemon();
    let mut task: Value =
        serde_json::from_slice(&std::fs::read(repo().join("config/examples/task.json")).unwrap()).unwrap();
    task["taskId"] = "ex1".into();
    t.drop_task("ex1.json", &task.to_string());
    wait_until(60, "the example task to end", || matches!(t.status_of("ex1").as_str(), "completed" | "failed"));
    assert_eq!(t.status_of("ex1"), "completed", "{}", d.output());
    let intent = task["description"].as_str().unwrap();
    let board = t.run(&["board", "snapshot", "ex1", "--json"]).json();
    assert_eq!(board["meta_zone"]["intent"], intent, "{board}");
    let note = board["content_zone"]["notes"]["analyst"].as_str().unwrap();
    assert!(note.contains(intent), "the analyst's notes come from its slice: {note}");
    let out = output_of(&t, "ex1", "iter-1/analyst");
    assert!(out["summary"].as_str().unwrap().contains(intent));
    let history = t.run(&["board", "history", "ex1", "content.notes", "--json"]).json();
    let writes = history["records"].as_array().unwrap();
    assert_eq!(writes.len(), 1, "{history}");
    assert_eq!(writes[0]["actor"]["role"], "analyst");
    assert_eq!(writes[0]["component"], "worker");
    let ledger = t.run(&["slice", "history", "ex1", "--json"]).json();
    let slices = ledger["entries"].as_array().unwrap();
    assert!(!slices.is_empty(), "{ledger}");
    for s in slices {
        assert_eq!((s["role"].as_str(), s["outcome"].as_str()), (Some("analyst"), Some("ok")), "{s}");
        assert_eq!(s["budget"], 200);
        assert!(s["tokens"].as_u64().unwrap() > 0 && s["tokens"].as_u64().unwrap() <= 200, "{s}");
    }
    assert_eq!(d.stop(), 0);
}

/// A person's `clawboard board` writes while a daemon runs the tree go through
/// the daemon (the daemon defers its own board records a few milliseconds, so a
/// write numbered from the files alone could take one of their numbers): they
/// land in order with the daemon's, and bad ones are refused as before.
#[test]
fn a_persons_board_writes_go_through_a_running_daemon() {
    let t = Tree::init();
    t.config(&sh_config(""));
    ended_task(&t, "p1");
    t.run(&["board", "set", "p1", "meta.intent", "before the daemon"]).ok();
    let d = t.daemon();
    assert!(!d.output().contains("a person's board write"));
    for i in 0..5 {
        t.run(&["board", "set", "p1", "meta.topic", &format!("\"topic {i}\"")]).ok();
    }
    t.run(&["board", "step-status", "p1", "title", "completed"]).ok();
    let bad = t.run(&["board", "set", "p1", "meta.intent", "42"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("task p1: meta.intent: is the number 42, not a string"), "{}", bad.stderr);
    let log = d.output();
    assert_eq!(log.matches("a person's board write").count(), 7, "{log}");
    let history = t.run(&["board", "history", "p1", "--json"]).json();
    let seqs: Vec<u64> = history["records"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    assert_eq!(t.run(&["board", "get", "p1", "meta.topic"]).stdout.trim(), "\"topic 4\"");
    assert_eq!(d.stop(), 0);
    // No daemon: the files directly, as before.
    t.run(&["board", "set", "p1", "meta.topic", "\"after\""]).ok();
    assert_eq!(t.run(&["board", "get", "p1", "meta.topic"]).stdout.trim(), "\"after\"");
}
