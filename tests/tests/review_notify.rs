//! Human review end to end, after the page (review.rs): notification hooks (a
//! command and a webhook served by a real HTTP listener, retried, and once after
//! a crash), GM records and arbitration, and `/metrics` over the Unix socket with
//! a row for every background job. Real binary and daemon.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use clawboard_tests::review::*;
use clawboard_tests::{Tree, sh_config, wait_until};

/// A real HTTP listener that answers 500 to the first `fail` POSTs, then 200, and keeps the bodies.
fn webhook_server(fail: usize) -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for (n, conn) in l.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0;
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            seen.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
            let status = if n < fail { "500 Internal Server Error" } else { "200 OK" };
            let _ = conn
                .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes());
        }
    });
    (addr, bodies)
}

#[test]
fn critical_escalations_run_the_hooks_with_retries_and_a_failing_hook_blocks_nothing() {
    let t = Tree::init();
    let (addr, bodies) = webhook_server(1);
    let got = t.dir.path().join("hook-stdin.json");
    let hook = format!(
        "[notify]\nlevels = [\"critical\", \"high\"]\ncommand = [\"sh\", \"-c\", \"cat > {}; echo $CLAWBOARD_ESCALATION_LEVEL >> {}.level\"]\nwebhook = \"http://{addr}/bot123:SECRET/sendMessage?chat_id=42\"\nretries = 2\nretry_delay = \"50ms\"\n",
        got.display(),
        got.display()
    );
    t.config(&esc_config("critical", &hook));
    let d = t.daemon();
    t.drop_task("n1.json", &task_json("n1", "use-esc notify me"));
    // The hook writes the JSON, then the level: wait for the second, the JSON is whole by then.
    let level = std::path::PathBuf::from(format!("{}.level", got.display()));
    wait_until(30, "the command hook", || std::fs::read_to_string(&level).is_ok_and(|l| l.ends_with('\n')));
    let esc = t.escalation_of("n1").unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&std::fs::read(&got).unwrap()).unwrap();
    assert_eq!(sent["level"], "critical");
    assert_eq!(sent["taskId"], "n1");
    assert_eq!(std::fs::read_to_string(format!("{}.level", got.display())).unwrap(), "critical\n");
    wait_until(30, "the webhook, retried once after a 500", || bodies.lock().unwrap().len() == 2);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(bodies.lock().unwrap().len(), 2, "one failed POST, one that worked, nothing more");
    assert_eq!(
        std::fs::read_to_string(format!("{}.level", got.display())).unwrap(),
        "critical\n",
        "the command ran once"
    );
    let body: serde_json::Value = serde_json::from_str(&bodies.lock().unwrap()[1]).unwrap();
    assert_eq!(body["id"], esc.as_str());
    assert!(body["text"].as_str().unwrap().starts_with("[critical] escalation from esc (task n1): spend 500 USD?"));
    let log = d.output();
    assert!(log.contains("retry 1 of 2"), "{log}");
    assert!(!log.contains("SECRET"), "the bot token never reaches the log: {log}");
    assert_eq!(d.stop(), 0);

    // A hook that always fails: logged and counted, the task is held and decided as usual.
    t.config(&esc_config(
        "high",
        "[notify]\nlevels = [\"high\"]\ncommand = [\"sh\", \"-c\", \"echo no route >&2; exit 3\"]\nretries = 1\nretry_delay = \"10ms\"\n",
    ));
    let d = t.daemon();
    t.drop_task("n2.json", &task_json("n2", "use-esc again"));
    // n1, still waiting on its escalation from the first daemon, is held again too,
    // at start or after n2: the count passes 1 only for a moment, if at all.
    wait_until(30, "both tasks held", || held(&t, 2) && t.escalation_of("n2").is_some());
    wait_until(30, "the hook to give up", || d.output().contains("failed after 1 retries"));
    assert!(d.output().contains("exited with exit status: 3: no route"), "{}", d.output());
    t.run(&["escalations", "approve", &t.escalation_of("n2").unwrap()]).ok();
    wait_until(30, "the task to complete", || t.status_of("n2") == "completed");
    let m = unix_get(&t, "/metrics");
    assert!(m.contains("clawboard_notify_failures_total 1"), "{m}");
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_escalation_whose_notification_a_crash_cut_off_is_notified_once_after_the_restart() {
    let t = Tree::init();
    let tried = t.dir.path().join("tried");
    let out = t.dir.path().join("notified");
    // The hook's first try fails and its retry waits a minute: the daemon dies in between.
    let hook = format!(
        "[notify]\nlevels = [\"critical\"]\ncommand = [\"sh\", \"-c\", \"if [ ! -e {tried} ]; then touch {tried}; exit 1; fi; echo $CLAWBOARD_ESCALATION_ID >> {out}\"]\nretries = 1\nretry_delay = \"60s\"\n",
        tried = tried.display(),
        out = out.display()
    );
    t.config(&esc_config("critical", &hook));
    let d = t.daemon();
    t.drop_task("k1.json", &task_json("k1", "use-esc notify me"));
    wait_until(30, "the hook's first, failing try", || tried.exists());
    wait_until(30, "the retry's wait", || d.output().contains("retry 1 of 1"));
    d.crash();
    assert!(!out.exists(), "nothing was notified before the crash");
    let esc = t.escalation_of("k1").unwrap();

    let d = t.daemon();
    wait_until(30, "the notification, sent by the restarted daemon", || out.exists());
    assert_eq!(d.stop(), 0);
    // A clean start after it sends nothing again.
    let d = t.daemon();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert_eq!(d.stop(), 0);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{esc}\n"), "notified exactly once");

    // Notifications off: the cursor goes, so it cannot hold back journal compaction.
    assert!(t.root.join(".clawboard/cursors/notify").exists());
    t.config(&esc_config("critical", ""));
    t.daemon().stop();
    assert!(!t.root.join(".clawboard/cursors/notify").exists());
}

#[test]
fn gm_records_every_ended_task_and_arbitrates_a_validator_that_never_passes() {
    let t = Tree::init();
    let validator = r#"["sh", "-c", "ctx=$(cat); case \"$ctx\" in *never-good*) printf '{\"score\":3.5,\"pass\":false,\"issues\":[{\"severity\":\"high\",\"description\":\"tests fail\"}]}';; *) printf '{\"score\":9,\"pass\":true}';; esac"]"#;
    let cfg = sh_config("").replace(
        "[roles.validator]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; printf '{\\\"score\\\":9,\\\"pass\\\":true}'\"]",
        &format!("[roles.validator]\ncommand = {validator}"),
    );
    assert!(cfg.contains("never-good"), "the validator was replaced");
    t.config(&cfg.replace("max_tasks = 16", "max_tasks = 16\nmax_iterations = 2"));
    let d = t.daemon();
    t.drop_task("g1.json", &task_json("g1", "fine"));
    t.drop_task("g2.json", &task_json("g2", "never-good work"));
    wait_until(60, "both tasks to end", || t.status_of("g1") == "completed" && t.status_of("g2") == "failed");
    wait_until(30, "gm/pm-performance.json to count both", || {
        std::fs::read_to_string(t.root.join("gm/pm-performance.json")).is_ok_and(|p| p.contains("\"tasks\": 2"))
    });
    assert_eq!(d.stop(), 0);

    let perf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("gm/pm-performance.json")).unwrap()).unwrap();
    let pm = &perf["pms"]["pm"];
    assert_eq!((pm["tasks"].as_u64(), pm["completed"].as_u64(), pm["failed"].as_u64()), (Some(2), Some(1), Some(1)));
    assert_eq!(pm["passRate"], 0.5);
    assert_eq!(pm["averageScore"], 6.25, "(9 + 3.5) / 2: {perf}");
    assert_eq!(pm["averageIterations"], 1.5, "(1 + 2) / 2: {perf}");
    t.run(&["validate", t.root.join("gm/pm-performance.json").to_str().unwrap()]).ok();

    let arb = std::fs::read_to_string(t.root.join("gm/arbitrations.md")).unwrap();
    assert!(arb.contains("task g2: validator and team disagree after 2 iterations"), "{arb}");
    assert!(arb.contains("[validation.json](../tasks/g2/validation.json)") && arb.contains("- tests fail"), "{arb}");
    assert!(!arb.contains("task g1"), "{arb}");

    // The reports see both tasks; bad dates are refused naming the flag.
    // The day the tasks ended (not today: the test may run across midnight UTC).
    let today = t.task("g1").unwrap()["completedAt"].as_str().unwrap()[..10].to_owned();
    let r = t.run(&["report", "daily", "--date", &today]);
    r.ok();
    assert_eq!(r.stdout.trim(), format!("Wrote reports/daily/{today}.md"));
    let report = std::fs::read_to_string(t.root.join(format!("reports/daily/{today}.md"))).unwrap();
    assert!(report.contains("| ended | 2 |") && report.contains("| pm | 2 | 1 | 1 | 50% | 6.2 | 1.5 |"), "{report}");
    let weekly = t.run(&["report", "weekly", "--date", "2026-11-20", "--stdout"]);
    weekly.ok();
    assert!(weekly.stdout.starts_with("# Weekly report — 2026-W47 (2026-11-16 to 2026-11-22)"), "{}", weekly.stdout);
    // The week before it (from 2026-11-09) reaches past the 7 days failed tasks are kept.
    assert!(
        weekly.stdout.contains("- Retention deletes failed tasks 7 days after they end (`retention.tasks.failed`)"),
        "{}",
        weekly.stdout
    );
    assert!(!t.root.join("reports/weekly/2026-W47.md").exists(), "--stdout writes nothing");
    let bad = t.run(&["report", "monthly", "--date", "2026-02-30"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("--date \"2026-02-30\": not a date"), "{}", bad.stderr);
}

#[test]
fn metrics_have_a_row_for_every_background_job() {
    let t = Tree::init();
    t.config(&esc_config("critical", "[notify]\nlevels = [\"critical\"]\ncommand = [\"true\"]\n"));
    let d = t.daemon();
    t.drop_task("m1.json", &task_json("m1", "use-esc"));
    wait_until(30, "the task held", || held(&t, 1));
    let rows = |m: &str, family: &str| -> Vec<(String, u64)> {
        m.lines()
            .filter_map(|l| l.strip_prefix(&format!("{family}{{job=\"")))
            .filter_map(|l| l.split_once("\"} "))
            .map(|(job, n)| (job.to_owned(), n.parse().unwrap()))
            .collect()
    };
    wait_until(30, "the notification round", || {
        rows(&unix_get(&t, "/metrics"), "clawboard_job_rounds_total").iter().any(|(j, n)| j == "notify" && *n > 0)
    });
    let m = unix_get(&t, "/metrics");
    let mut jobs: Vec<String> = rows(&m, "clawboard_job_rounds_total").into_iter().map(|(j, _)| j).collect();
    jobs.sort();
    let want = [
        "accepted-claims",
        "archive",
        "claims",
        "heartbeat",
        "intake",
        // Always on, so that a reload can add lanes.
        "lanes",
        "notify",
        "pull",
        "push",
        "records",
        "retention",
    ];
    assert_eq!(jobs, want, "{m}");
    assert!(rows(&m, "clawboard_job_failing").iter().all(|(_, n)| *n == 0), "{m}");
    assert!(rows(&m, "clawboard_job_failures_total").iter().all(|(_, n)| *n == 0), "{m}");
    // Consumers report how far behind the journal they are; workers follow no journal.
    let lag: Vec<String> = rows(&m, "clawboard_job_lag_entries").into_iter().map(|(j, _)| j).collect();
    assert_eq!(lag, ["intake", "lanes", "notify"], "{m}");
    assert!(
        !m.contains("clawboard_job_lag_entries{job=\"push\"}"),
        "the push keeps its own cursor: not a runner consumer"
    );
    assert_eq!(d.stop(), 0);
}

/// The notify hook is handed text roles wrote: it gets the few inherited
/// variables and its `pass_env`, none of the daemon's keys.
#[test]
fn the_notify_hook_finds_none_of_the_daemons_keys_in_its_environment() {
    let t = Tree::init();
    let dumped = t.dir.path().join("hook-env.txt");
    let hook = format!(
        "[notify]\nlevels = [\"critical\"]\ncommand = [\"sh\", \"-c\", \"env > {0}.tmp; mv {0}.tmp {0}\"]\npass_env = [\"CHAT_WEBHOOK_URL\"]\n",
        dumped.display()
    );
    t.config(&esc_config("critical", &hook));
    let secrets = [
        ("AWS_ACCESS_KEY_ID", "AKIAHOOKTEST"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-for-the-hook-test"),
        ("GITHUB_TOKEN", "ghp_hooktest"),
        ("CLAWBOARD_LLM_MODEL_API_KEY", "sk-hooktest"),
    ];
    let mut env = secrets.to_vec();
    env.push(("CHAT_WEBHOOK_URL", "https://chat.example/hook"));
    let d = t.daemon_with_env(&env);
    t.drop_task("n1.json", &task_json("n1", "use-esc notify me"));
    wait_until(30, "the hook's environment", || dumped.exists());
    let seen = std::fs::read_to_string(&dumped).unwrap();
    for (name, value) in secrets {
        assert!(!seen.contains(value), "{name} reached the hook:\n{seen}");
    }
    assert!(seen.contains("CHAT_WEBHOOK_URL=https://chat.example/hook"), "{seen}");
    assert!(seen.contains("CLAWBOARD_ESCALATION_LEVEL=critical"), "{seen}");
    assert!(seen.lines().any(|l| l.starts_with("PATH=")), "{seen}");
    assert_eq!(d.stop(), 0);

    // A name that cannot be a variable's is refused, naming the key.
    let cfg = t.config(&esc_config("critical", "[notify]\ncommand = [\"true\"]\npass_env = [\"NOT-A-NAME\"]\n"));
    let r = t.run(&["--config", cfg.to_str().unwrap(), "doctor"]);
    assert_ne!(r.code, 0);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(said.contains("notify.pass_env[0]") && said.contains("is not a variable name"), "{said}");
}
