//! The daemon end to end: real processes, real files, real signals.

use std::time::Duration;

use clawboard_tests::{Tree, sh_config, wait_until};

fn task_json(id: &str, description: &str) -> String {
    format!(r#"{{"taskId":"{id}","type":"coding","description":"{description}"}}"#)
}

fn terminal(t: &Tree, id: &str) -> bool {
    matches!(t.status_of(id).as_str(), "completed" | "failed")
}

#[test]
fn demo_shows_the_whole_lifecycle() {
    let t = Tree::new();
    let r = t.run(&["demo"]);
    r.ok();
    for want in [
        "rejected: inbox/demo-invalid-",
        "/priority: \"urgent\" is not one of high, normal, low",
        "the demo approves it",
        "iter-2/validator",
        "completed done",
        "daemon stopped (exit status: 0)",
        // The blueprint task (seed 001): three titles, the fixed word, a quality round, the slices.
        "blueprint xiaohongshu_viral: success",
        "title candidate  88.0  秋冬护肤很好的三个习惯",
        "sensitive word \"最好\" replaced by \"很好\"",
        "round 2: control.quality_scores.virality was 68",
        "% of full context)",
    ] {
        assert!(r.stdout.contains(want), "missing {want:?} in:\n{}", r.stdout);
    }
    assert_eq!(r.stdout.matches("    title candidate ").count(), 3, "{}", r.stdout);
    let tasks: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    let viral = tasks.iter().find(|n| n.starts_with("demo-blueprint-")).unwrap();
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("tasks").join(viral).join("result.json")).unwrap()).unwrap();
    assert_eq!(result["output"]["execution_result"]["status"], "success");
    assert_eq!(result["output"]["final_content"]["title"], "秋冬护肤很好的三个习惯");
    let iterate = tasks.iter().find(|n| n.starts_with("demo-iterate-")).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("tasks").join(iterate).join("validation.json")).unwrap())
            .unwrap();
    assert_eq!((v["iterations"].as_u64(), v["result"]["pass"].as_bool()), (Some(2), Some(true)));
    let decisions = std::fs::read_to_string(t.root.join("gm/decisions.md")).unwrap();
    assert!(decisions.contains("approved") && decisions.contains("- by: demo"), "{decisions}");
}

#[test]
fn two_hundred_tasks_dropped_at_once_all_complete() {
    let t = Tree::init();
    t.config(&sh_config(""));
    let d = t.daemon();
    // Written first, then renamed in together, as a burst.
    let staging = t.dir.path().join("burst");
    std::fs::create_dir_all(&staging).unwrap();
    for i in 0..200 {
        std::fs::write(staging.join(format!("b{i}.json")), task_json(&format!("b{i}"), "burst")).unwrap();
    }
    for i in 0..200 {
        std::fs::rename(staging.join(format!("b{i}.json")), t.root.join(format!("inbox/b{i}.json"))).unwrap();
    }
    wait_until(120, "200 tasks to complete", || (0..200).all(|i| t.status_of(&format!("b{i}")) == "completed"));
    for i in 0..200 {
        let runs = t.attempts(&format!("b{i}"));
        assert_eq!(runs.len(), 4, "b{i}: {runs:?}");
    }
    assert_eq!(std::fs::read_dir(t.root.join("inbox")).unwrap().count(), 1, "only inbox/rejected/ is left");
    assert_eq!(d.stop(), 0);
}

#[test]
fn failing_roles_retry_then_fall_back_or_fail() {
    let t = Tree::init();
    t.config(&sh_config(
        r#"
[roles.slow]
command = ["sleep", "20"]
timeout = "300ms"
max_retries = 1
retry_backoff = "10ms"
fallback = "skill"

[roles.garbage]
command = ["sh", "-c", "cat >/dev/null; echo this is not json; echo broken >&2"]
max_retries = 1
retry_backoff = "10ms"

[roles.crash]
command = ["sh", "-c", "cat >/dev/null; echo dying >&2; exit 3"]
max_retries = 2
retry_backoff = "10ms"
fallback = "skill"
"#,
    ));
    let d = t.daemon();
    t.drop_task("slow.json", &task_json("t-slow", "use-slow"));
    t.drop_task("garbage.json", &task_json("t-garbage", "use-garbage"));
    t.drop_task("crash.json", &task_json("t-crash", "use-crash"));
    wait_until(60, "three tasks to end", || ["t-slow", "t-garbage", "t-crash"].iter().all(|id| terminal(&t, id)));

    let statuses = |id: &str, role: &str| -> Vec<String> {
        t.attempts(id).iter().filter(|a| a["role"] == role).map(|a| a["status"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(t.status_of("t-slow"), "completed");
    assert_eq!(statuses("t-slow", "slow"), vec!["timedout", "timedout"]);
    assert_eq!(statuses("t-slow", "skill"), vec!["ok"]);

    assert_eq!(t.status_of("t-garbage"), "failed");
    assert_eq!(statuses("t-garbage", "garbage"), vec!["failed", "failed"]);
    let a = &t.attempts("t-garbage")[1];
    assert!(a["error"].as_str().unwrap().starts_with("invalid output: stdout /: "), "{a}");
    let log = std::fs::read_to_string(t.root.join("tasks/t-garbage/errors.log")).unwrap();
    assert!(log.contains("stderr: broken"), "{log}");
    let result = std::fs::read_to_string(t.root.join("tasks/t-garbage/result.json")).unwrap();
    assert!(result.contains("\"partial\": true"), "{result}");
    // The garbage it printed is kept, byte for byte.
    let stem = format!("{:04}-garbage", a["number"].as_u64().unwrap());
    assert_eq!(
        std::fs::read_to_string(t.root.join(format!("tasks/t-garbage/attempts/{stem}.stdout"))).unwrap(),
        "this is not json\n"
    );

    assert_eq!(t.status_of("t-crash"), "completed");
    assert_eq!(statuses("t-crash", "crash"), vec!["failed", "failed", "failed"]);
    assert_eq!(statuses("t-crash", "skill"), vec!["ok"]);
    assert_eq!(d.stop(), 0);
}

fn esc_config() -> String {
    sh_config(
        r#"
[roles.esc]
command = ["sh", "-c", "cat >/dev/null; printf '{\"summary\":\"asks\",\"escalations\":[{\"level\":\"critical\",\"issue\":\"spend 500 USD?\",\"requiresHumanApproval\":true}]}'"]
retry_backoff = "10ms"
"#,
    )
}

#[test]
fn escalations_hold_tasks_until_approved_or_rejected() {
    let t = Tree::init();
    t.config(&esc_config());
    let d = t.daemon();
    t.drop_task("e1.json", &task_json("e1", "use-esc"));
    t.drop_task("e2.json", &task_json("e2", "use-esc"));
    wait_until(30, "escalations", || t.escalation_of("e1").is_some() && t.escalation_of("e2").is_some());
    wait_until(30, "both tasks to be held", || t.daemon_status().is_some_and(|s| s["queue"]["held"] == 2));
    let (id1, id2) = (t.escalation_of("e1").unwrap(), t.escalation_of("e2").unwrap());
    assert_eq!(t.status_of("e1"), "running");
    let page = std::fs::read_to_string(t.root.join("tasks/e1/status.md")).unwrap();
    assert!(page.contains(&format!("clawboard escalations approve {id1}")), "{page}");

    t.run(&["escalation", "approve", &id1, "--note", "within budget"]).ok();
    let r = t.run(&["escalation", "reject", &id2, "--note", "too expensive"]);
    r.ok();
    wait_until(30, "decided tasks to end", || terminal(&t, "e1") && terminal(&t, "e2"));
    assert_eq!(t.status_of("e1"), "completed");
    assert_eq!(t.status_of("e2"), "failed");
    let result = std::fs::read_to_string(t.root.join("tasks/e2/result.json")).unwrap();
    assert!(result.contains("was rejected by human: too expensive"), "{result}");
    let again = t.run(&["escalation", "reject", &id1]);
    again.expect_code(2);
    assert!(again.stderr.contains("was already approved by human"), "{}", again.stderr);
    let decisions = std::fs::read_to_string(t.root.join("gm/decisions.md")).unwrap();
    assert!(
        decisions.contains(&format!("escalation {id1} approved")) && decisions.contains("- note: too expensive"),
        "{decisions}"
    );
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_decision_made_while_the_daemon_is_down_is_picked_up() {
    let t = Tree::init();
    t.config(&esc_config());
    let d = t.daemon();
    t.drop_task("e3.json", &task_json("e3", "use-esc"));
    wait_until(30, "the escalation", || t.escalation_of("e3").is_some());
    wait_until(30, "the task to be held", || t.daemon_status().is_some_and(|s| s["queue"]["held"] == 1));
    assert_eq!(d.stop(), 0);
    t.run(&["escalation", "approve", &t.escalation_of("e3").unwrap()]).ok();
    let d = t.daemon();
    wait_until(30, "the task to complete", || t.status_of("e3") == "completed");
    assert_eq!(d.stop(), 0);
}

#[test]
fn sighup_reloads_roles_without_dropping_work() {
    let t = Tree::init();
    let v = |s: &str| sh_config("").replace("w did it", s);
    t.config(&v("version one"));
    let d = t.daemon();
    t.drop_task("r1.json", &task_json("r1", "first"));
    wait_until(30, "r1", || t.status_of("r1") == "completed");
    t.config(&v("version two"));
    d.signal("HUP");
    wait_until(10, "the reload", || d.output().contains("config reloaded"));
    t.drop_task("r2.json", &task_json("r2", "second"));
    wait_until(30, "r2", || t.status_of("r2") == "completed");
    let summary = |id: &str| std::fs::read_to_string(t.root.join(format!("tasks/{id}/result.json"))).unwrap();
    assert!(summary("r1").contains("version one") && summary("r2").contains("version two"));
    // A broken config on reload is refused; the old one stays.
    t.config("[lifecycle]\nmax_tasks = \"many\"\n");
    d.signal("HUP");
    wait_until(10, "the refused reload", || d.output().contains("config not reloaded"));
    assert!(t.daemon_status().is_some());
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_second_daemon_on_the_same_root_is_refused() {
    let t = Tree::init();
    t.config(&sh_config(""));
    let d = t.daemon();
    let cfg = t.dir.path().join("clawboard.toml");
    let r = t.run(&["--config", cfg.to_str().unwrap(), "daemon"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains(&format!("another clawboard daemon (pid {}) is already running", d.child.id())),
        "{}",
        r.stderr
    );
    assert_eq!(d.stop(), 0);
}

/// The root's lock held by a process that names no pid in it (as `clawboard run`
/// does, or a child it forked that has not yet exec'd when it was killed): a
/// daemon waits up to 2 s for it, starts when it is let go of within that, and
/// otherwise refuses, saying what holds it.
#[test]
fn a_daemon_waits_briefly_for_a_lock_a_killed_process_still_holds() {
    let t = Tree::init();
    t.config(&sh_config(""));
    let lock_path = t.root.join(".clawboard/daemon.lock");
    let hold = || {
        let f =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&lock_path).unwrap();
        f.lock().unwrap();
        f
    };
    let held = hold();
    let started = std::time::Instant::now();
    let r = t.run(&["daemon"]);
    r.expect_code(1);
    assert!(started.elapsed() >= Duration::from_millis(1900), "refused after {:?}", started.elapsed());
    assert!(r.stderr.contains("another clawboard process holds") && r.stderr.contains("daemon.lock"), "{}", r.stderr);
    // Let go of 500 ms after the daemon starts: it waits, and runs.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(held);
    });
    let d = t.daemon();
    releaser.join().unwrap();
    wait_until(10, "the daemon's status", || t.daemon_status().is_some());
    assert_eq!(d.stop(), 0);
}

#[test]
fn sigterm_lets_short_roles_finish_and_interrupts_long_ones() {
    let t = Tree::init();
    let mark = t.dir.path().join("long-ran-once");
    t.config(&sh_config(&format!(r#"
[roles.long]
command = ["sh", "-c", "cat >/dev/null; if [ -e {m} ]; then printf '{{\"summary\":\"quick now\"}}'; else touch {m}; sleep 30; fi"]
timeout = "60s"
"#, m = mark.display())).replace("shutdown_grace = \"2s\"", "shutdown_grace = \"500ms\""));
    let d = t.daemon();
    t.drop_task("l1.json", &task_json("l1", "use-long"));
    wait_until(30, "the long role to start", || mark.exists());
    let started = std::time::Instant::now();
    assert_eq!(d.stop(), 0);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "stop took {:?}", started.elapsed());
    assert_eq!(t.status_of("l1"), "running");
    let d = t.daemon();
    wait_until(30, "l1 to complete", || t.status_of("l1") == "completed");
    let long: Vec<String> = t
        .attempts("l1")
        .iter()
        .filter(|a| a["role"] == "long")
        .map(|a| a["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(long, vec!["interrupted", "ok"]);
    // The PM step finished before the stop and did not run again.
    assert_eq!(t.attempts("l1").iter().filter(|a| a["role"] == "pm").count(), 1);
    assert_eq!(d.stop(), 0);
}

#[test]
fn editor_files_are_ignored_and_slow_writes_are_taken_whole() {
    use std::io::Write;
    let t = Tree::init();
    t.config(&sh_config(""));
    let d = t.daemon();
    for junk in [".draft.json.swp", "draft.json~", ".#draft.json", "draft.json.tmp"] {
        std::fs::write(t.root.join("inbox").join(junk), "{ not json").unwrap();
    }
    // Written in two parts with a pause: the first half alone is invalid JSON.
    let body = task_json("slow-write", "written slowly");
    let (a, b) = body.split_at(body.len() / 2);
    let mut f = std::fs::File::create(t.root.join("inbox/slow.json")).unwrap();
    f.write_all(a.as_bytes()).unwrap();
    f.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    f.write_all(b.as_bytes()).unwrap();
    drop(f);
    wait_until(30, "the slowly written task", || t.status_of("slow-write") == "completed");
    // A task directory moved in whole is seen at once.
    let prepared = t.dir.path().join("moved-in");
    std::fs::create_dir_all(&prepared).unwrap();
    std::fs::write(prepared.join("task.json"), task_json("moved-in", "moved")).unwrap();
    std::fs::rename(&prepared, t.root.join("tasks/moved-in")).unwrap();
    wait_until(30, "the moved-in task", || t.status_of("moved-in") == "completed");
    let rejected: Vec<_> = std::fs::read_dir(t.root.join("inbox/rejected")).unwrap().collect();
    assert!(rejected.is_empty(), "{rejected:?}");
    assert!(t.root.join("inbox/.draft.json.swp").exists(), "editor files are left alone");
    assert_eq!(d.stop(), 0);
}

#[test]
fn tasks_dropped_while_no_daemon_runs_are_taken_at_start() {
    let t = Tree::init();
    t.config(&sh_config(""));
    t.drop_task("early.json", &task_json("early", "before the daemon"));
    t.run_with_stdin(&["task", "submit", "-"], task_json("submitted", "via the CLI").as_bytes()).ok();
    let d = t.daemon();
    wait_until(30, "both tasks", || t.status_of("early") == "completed" && t.status_of("submitted") == "completed");
    assert_eq!(d.stop(), 0);
}

#[test]
fn tells_systemd_ready_watchdog_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let t = Tree::init();
    t.config(&sh_config(""));
    let sock_path = t.dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let cfg = t.dir.path().join("clawboard.toml");
    // systemd sets WATCHDOG_PID to the service's pid: exec keeps the shell's.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\""])
        .arg(clawboard_tests::bin())
        .args(["--root", t.root.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "daemon"])
        .current_dir(clawboard_tests::repo())
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    let mut next = || {
        let n = sock.recv(&mut buf).expect("a notification from the daemon");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    got.push(next());
    assert!(got[0].contains("READY=1"), "{got:?}");
    // At least two watchdog pings (every 100 ms for WATCHDOG_USEC=200000).
    let pings = (0..20).map(|_| next()).filter(|m| m.contains("WATCHDOG=1")).count();
    assert!(pings >= 2, "{pings} pings");
    assert!(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let stopping = (0..20).map(|_| next()).any(|m| m.contains("STOPPING=1"));
    assert!(stopping);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_decision_racing_the_hold_is_not_lost() {
    // Each escalation is approved the moment its file appears, often before the
    // daemon has recorded the task as held. Every task must still complete.
    let t = Tree::init();
    t.config(&esc_config());
    let d = t.daemon();
    for i in 0..20 {
        t.drop_task(&format!("race{i}.json"), &task_json(&format!("race{i}"), "use-esc"));
    }
    // Decided in-process (as the demo does), within a millisecond of the file appearing.
    let store = clawboard_core::Store::open(&t.root).unwrap();
    let mut approved = std::collections::HashSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while approved.len() < 20 {
        assert!(std::time::Instant::now() < deadline, "escalations did not all appear");
        for i in 0..20 {
            if let Some(id) = t.escalation_of(&format!("race{i}"))
                && approved.insert(id.clone())
            {
                let decision = clawboard_core::formats::Decision::Approved;
                clawboard_records::escalations::decide(&store, &id, decision, "human", None).unwrap();
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    wait_until(60, "every task to complete", || (0..20).all(|i| t.status_of(&format!("race{i}")) == "completed"));
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_http_role_gets_the_context_and_its_answer_is_the_output() {
    // A real HTTP server; it says whether the role's headers name the task.
    let server = clawboard_tests::HttpRole::start(
        r#""reviewed %s over http (%s)" % (ctx["task"]["taskId"], "headers ok" if self.headers["authorization"].startswith("Bearer ") and self.headers["x-clawboard-task-id"] == ctx["task"]["taskId"] else "headers wrong")"#,
    );
    let t = Tree::init();
    t.config(&sh_config(&format!(
        "\n[roles.reviewer]\nhttp = {{ url = \"http://127.0.0.1:{}/run\" }}\ntimeout = \"10s\"\n",
        server.port
    )));
    let d = t.daemon();
    t.drop_task("h1.json", &task_json("h1", "use-http"));
    wait_until(30, "h1", || terminal(&t, "h1"));
    drop(server);
    assert_eq!(t.status_of("h1"), "completed", "{}", d.output());
    let result = std::fs::read_to_string(t.root.join("tasks/h1/result.json")).unwrap();
    assert!(result.contains("reviewed h1 over http (headers ok)"), "{result}");
    assert_eq!(d.stop(), 0);
}

/// The watcher covers the root and each directory under it but not `.clawboard/`:
/// a directory made at the root while the daemon runs (or moved in whole) is
/// watched from then on, and what is written deep inside it is journaled.
#[test]
fn directories_made_at_the_root_while_running_are_watched() {
    let t = Tree::init();
    t.config(&sh_config(""));
    let d = t.daemon();
    let journaled = |rel: &str| {
        std::fs::read_dir(t.root.join(".clawboard/journal"))
            .unwrap()
            .flatten()
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|j| j.contains(&format!("\"{rel}\""))))
    };
    std::fs::create_dir_all(t.root.join("notes/deep")).unwrap();
    std::fs::write(t.root.join("notes/deep/first.md"), "first\n").unwrap();
    wait_until(10, "the file in the new directory", || journaled("notes/deep/first.md"));
    // Made after the new directory's scan: only a watch on it sees this one.
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::create_dir_all(t.root.join("notes/deeper/still")).unwrap();
    std::fs::write(t.root.join("notes/deeper/still/later.md"), "later\n").unwrap();
    wait_until(10, "a file written later, further down", || journaled("notes/deeper/still/later.md"));
    let moved = t.dir.path().join("moved");
    std::fs::create_dir_all(moved.join("sub")).unwrap();
    std::fs::rename(&moved, t.root.join("moved")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(t.root.join("moved/sub/after.md"), "after\n").unwrap();
    wait_until(10, "a file written into a directory moved in", || journaled("moved/sub/after.md"));
    // The daemon's own state is never journaled.
    std::fs::write(t.root.join(".clawboard/scratch-note"), "x").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!journaled(".clawboard/scratch-note"));
    assert_eq!(d.stop(), 0);
}
