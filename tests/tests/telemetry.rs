//! `[telemetry]`: spans of tasks, role runs and model calls sent over OTLP/HTTP
//! to a real Arize Phoenix (`scripts/phoenix`), and read back through its API.
//! A task `clawboard run` started, killed with `kill -9` and finished by a daemon
//! is one trace; a collector that is down or never answers costs the tasks
//! nothing but their spans, counted on `/metrics`. The model's `chat` spans are
//! checked in `llm.rs` (a server in the test) and `model.rs` (the local model).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use clawboard_tests::phoenix::{self, attr, names, trace_of, wait_spans};
use clawboard_tests::{Tree, sh_config, wait_until};
use serde_json::Value;

const STEPS: usize = 8;

/// A linear blueprint of [`STEPS`] steps whose role sleeps a little, notes its
/// `TRACEPARENT` and prints a line of text; and the input to run it.
fn setup(t: &Tree, telemetry: &str) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let bp_dir = clawboard_tests::blueprints::linear_blueprint(t, STEPS, "trace test");
    let seen = t.dir.path().join("traceparents.log");
    let config = format!(
        r#"[daemon]
shutdown_grace = "2s"

[blueprints]
dir = "{}"

[roles.step]
command = ["sh", "-c", "cat > /dev/null; sleep 0.4; echo \"$TRACEPARENT\" >> '{}'; echo '{{\"output\": \"a step of the trace test\"}}'"]
timeout = "30s"
max_retries = 0

{telemetry}"#,
        bp_dir.display(),
        seen.display()
    );
    let cfg = t.config(&config);
    let input = t.scratch("in.json", br#"{"user_input": {"topic": "traces", "platform": "general"}}"#);
    (cfg.to_str().unwrap().to_owned(), input, seen)
}

#[test]
fn a_run_killed_mid_blueprint_and_finished_by_the_daemon_is_one_trace_in_phoenix() {
    let t = Tree::init();
    let (cfg, input, seen) = setup(&t, &phoenix::telemetry_config(""));
    let mut child = t
        .command(&["--config", &cfg, "run", "linear", "--input", input.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let task = loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).expect("clawboard run named no task");
        if let Some(rest) = line.strip_prefix("task ") {
            break rest.split(':').next().unwrap().to_owned();
        }
    };
    // Killed while step 6 runs: steps 1-5 ended in this process.
    let lines = || std::fs::read_to_string(&seen).unwrap_or_default().lines().count();
    wait_until(60, "five steps to run", || lines() >= 5);
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();

    let d = t.daemon();
    wait_until(120, "the daemon to finish the task", || t.status_of(&task) == "completed");
    let (trace, root) = trace_of(&t.root, &task);
    let spans = wait_spans(&trace, 60, |s| {
        s.iter().any(|s| s["context"]["span_id"] == root.as_str())
            && s.iter().any(|s| s["name"] == "invoke_agent step" && attr(s, "clawboard.step.id") == "bp/s8")
    });

    // One root, the one trace.json names, the task's workflow; every other span under it.
    let roots: Vec<&Value> = spans.iter().filter(|s| s["parent_id"].is_null()).collect();
    assert_eq!(roots.len(), 1, "one root: {:#?}", names(&spans));
    assert_eq!(roots[0]["context"]["span_id"], root.as_str());
    assert_eq!(roots[0]["name"], "invoke_workflow linear");
    assert_eq!(attr(roots[0], "gen_ai.operation.name"), "invoke_workflow");
    assert_eq!(attr(roots[0], "clawboard.task.id"), task.as_str());
    assert_eq!(attr(roots[0], "clawboard.task.status"), "completed");
    for s in spans.iter().filter(|s| !s["parent_id"].is_null()) {
        assert_eq!(s["parent_id"], root.as_str(), "{s:#}");
    }
    // Spans from both processes: a step before the kill and one after, and the
    // run the kill cut short, recorded by the daemon when it resumed.
    let ok_steps: Vec<&str> = spans
        .iter()
        .filter(|s| s["name"] == "invoke_agent step" && attr(s, "clawboard.attempt.status") == "ok")
        .map(|s| attr(s, "clawboard.step.id").as_str().unwrap())
        .collect();
    assert!(ok_steps.contains(&"bp/s1") && ok_steps.contains(&"bp/s8"), "{ok_steps:?}");
    let cut: Vec<&Value> = spans.iter().filter(|s| attr(s, "clawboard.attempt.status") == "interrupted").collect();
    assert_eq!(cut.len(), 1, "{:#?}", names(&spans));
    assert_eq!(attr(cut[0], "error.type"), "interrupted");
    let resumed: Vec<&Value> = spans.iter().filter(|s| s["name"] == "resumed").collect();
    assert_eq!(resumed.len(), 1, "{:#?}", names(&spans));
    assert_eq!(attr(resumed[0], "clawboard.resume.interrupted"), 1);
    assert!(attr(roots[0], "clawboard.contract.status").is_string(), "{:#}", roots[0]);
    assert_eq!(cut[0]["status_code"], "ERROR");
    assert_eq!(roots[0]["span_kind"], "CHAIN", "Phoenix types it from openinference.span.kind");
    // Each run's span counts the board records it wrote (its output): at least
    // the daemon's three steps (the killed process's last spans may not have left it).
    let writing = phoenix::board_writes_match_history(&t.root, &task, &spans);
    assert!(writing >= 3, "{writing} runs wrote to the board");
    // Each step's own span, with its slice.
    let s8 = spans.iter().find(|s| attr(s, "clawboard.step.id") == "bp/s8").unwrap();
    assert_eq!(attr(s8, "gen_ai.agent.name"), "step");
    assert!(attr(s8, "clawboard.slice.tokens").as_u64().unwrap() > 0, "{s8:#}");
    assert!(attr(s8, "clawboard.board.tokens").as_u64().unwrap() > 0, "{s8:#}");
    // Every role process was handed its own span's context in the same trace.
    let parents = std::fs::read_to_string(&seen).unwrap();
    let agent_ids: Vec<&str> = spans.iter().filter_map(|s| s["context"]["span_id"].as_str()).collect();
    for line in parents.lines() {
        let parts: Vec<&str> = line.split('-').collect();
        assert_eq!(parts.len(), 4, "{line}");
        assert_eq!((parts[0], parts[1], parts[3]), ("00", trace.as_str(), "01"), "{line}");
        if line == parents.lines().last().unwrap() {
            assert!(agent_ids.contains(&parts[2]), "the last run's span is in Phoenix: {line}");
        }
    }
    assert!(d.output().contains("telemetry: spans go to the OTLP endpoint"), "{}", d.output());

    // doctor finds the collector taking spans.
    let doc = t.command(&["--config", &cfg, "--json", "doctor"]).stdin(Stdio::null()).output().unwrap();
    let checks: Value = serde_json::from_slice(&doc.stdout).unwrap();
    let tel = checks.as_array().unwrap().iter().find(|c| c["check"] == "telemetry").unwrap();
    assert_eq!(tel["level"], "ok", "{tel}");
    assert_eq!(d.stop(), 0);

    replay_and_fork_are_linked(&t, &cfg, &task, &trace);
}

/// A replay of `task` is a trace of its own, linked to `trace`, its runs marked
/// replayed; a fork of it links to it too.
fn replay_and_fork_are_linked(t: &Tree, cfg: &str, task: &str, trace: &str) {
    // A replay is a trace of its own, linked to this one.
    let into = t.dir.path().join("replayed");
    let r = t
        .command(&["--config", cfg, "--json", "task", "replay", task, "--into", into.to_str().unwrap()])
        .output()
        .unwrap();
    // Every step the same, the board's history too.
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stdout));
    let report: Value =
        serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&r.stderr)));
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), STEPS, "{report:#}");
    assert!(steps.iter().all(|s| s["verdict"] == "same"), "{report:#}");
    let replayed: Value =
        serde_json::from_slice(&std::fs::read(into.join(format!("tasks/{task}/trace.json"))).unwrap()).unwrap();
    assert_ne!(replayed["traceId"], trace);
    assert_eq!(replayed["links"][0]["traceId"], trace);
    assert_eq!(replayed["links"][0]["relation"], "replay of");
    let replay_root = replayed["spanId"].as_str().unwrap().to_owned();
    let spans = wait_spans(replayed["traceId"].as_str().unwrap(), 60, |s| {
        s.iter().any(|s| s["context"]["span_id"] == replay_root.as_str())
    });
    let agents: Vec<&Value> = spans.iter().filter(|s| s["name"] == "invoke_agent step").collect();
    assert!(agents.iter().all(|s| attr(s, "clawboard.replayed") == true), "{:#?}", names(&spans));

    // A fork is a task of its own, its trace linked to the original's.
    let r = t.command(&["--config", cfg, "--json", "task", "fork", task, "--at", "bp/s7", "--run"]).output().unwrap();
    let forked: Value =
        serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&r.stderr)));
    let fork = forked["task"].as_str().unwrap();
    let fork_trace: Value =
        serde_json::from_slice(&std::fs::read(t.root.join(format!("tasks/{fork}/trace.json"))).unwrap()).unwrap();
    assert_ne!(fork_trace["traceId"], trace);
    assert_eq!(fork_trace["links"][0]["traceId"], trace, "{fork_trace:#}");
    assert_eq!(fork_trace["links"][0]["relation"], "fork of");
    assert_eq!(fork_trace["links"][0]["taskId"], task);
}

/// A listener that takes connections and never answers them.
fn black_hole() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().map_while(Result::ok) {
            held.push(s);
        }
    });
    format!("http://{addr}")
}

/// A port nothing listens on.
fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

/// An OTLP/HTTP receiver that takes every export (200) and counts them, until
/// `up` is cleared: then it closes its port (connections are refused).
fn collector(addr: &str, up: Arc<AtomicBool>, taken: Arc<AtomicUsize>) -> std::thread::JoinHandle<()> {
    let l = TcpListener::bind(addr).unwrap();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while up.load(Ordering::SeqCst) {
            let Ok((sock, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            sock.set_nonblocking(false).unwrap();
            let mut r = BufReader::new(sock);
            let mut len = 0;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            if std::io::Read::read_exact(&mut r, &mut body).is_ok() {
                taken.fetch_add(1, Ordering::SeqCst);
            }
            let _ = std::io::Write::write_all(
                r.get_mut(),
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    })
}

fn drop_tasks(t: &Tree, ids: std::ops::Range<usize>) {
    for i in ids.clone() {
        t.drop_task(
            &format!("m{i}.json"),
            &format!(
                r#"{{"taskId":"m{i}","type":"coding","description":"d","priority":"normal","createdBy":"human"}}"#
            ),
        );
    }
    wait_until(60, "the tasks to complete", || ids.clone().all(|i| t.status_of(&format!("m{i}")) == "completed"));
}

/// A collector stopped while the daemon runs tasks, and started again: the tasks
/// run on; the spans of the outage are dropped and counted, the outage said once
/// and its end once; the spans after it are taken again.
#[test]
fn a_collector_stopped_mid_run_and_started_again_costs_only_the_spans_of_the_outage() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (up, taken) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicUsize::new(0)));
    let first = collector(&addr, up.clone(), taken.clone());
    let t = Tree::init();
    t.config(&sh_config(&format!("[telemetry]\notlp_endpoint = \"http://{addr}\"\ntimeout = \"2s\"\n")));
    let d = t.daemon();
    drop_tasks(&t, 0..3);
    wait_until(30, "the first tasks' spans to be taken", || counter(&metrics(&t), "exported") > 0);
    up.store(false, Ordering::SeqCst);
    first.join().unwrap();
    let before = taken.load(Ordering::SeqCst);
    drop_tasks(&t, 3..6);
    wait_until(30, "the outage's spans to be dropped", || counter(&metrics(&t), "dropped_export_failed") > 0);
    assert_eq!(taken.load(Ordering::SeqCst), before, "nothing reached a stopped collector");
    up.store(true, Ordering::SeqCst);
    let exported = counter(&metrics(&t), "exported");
    let again = collector(&addr, up.clone(), taken.clone());
    drop_tasks(&t, 6..8);
    wait_until(30, "the spans after the outage to be taken", || counter(&metrics(&t), "exported") > exported);
    let log = d.output();
    assert_eq!(log.matches("spans cannot be sent to").count(), 1, "the outage said once:\n{log}");
    assert_eq!(log.matches("takes spans again").count(), 1, "its end said once:\n{log}");
    assert_eq!(d.stop(), 0);
    up.store(false, Ordering::SeqCst);
    again.join().unwrap();
}

fn metrics(t: &Tree) -> String {
    clawboard_tests::review::unix_get(t, "/metrics")
}

fn counter(metrics: &str, outcome: &str) -> u64 {
    let key = format!("clawboard_telemetry_spans_total{{outcome=\"{outcome}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&key)).and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[test]
fn a_collector_that_is_down_or_never_answers_costs_the_tasks_nothing_but_their_spans() {
    for (what, endpoint) in [("never answers", black_hole()), ("is down", closed_port())] {
        let t = Tree::init();
        let cfg = t
            .config(&sh_config(&format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\ntimeout = \"1s\"\nqueue = 8\n")));
        let d = t.daemon();
        for i in 0..6 {
            t.drop_task(
                &format!("c{i}.json"),
                &format!(
                    r#"{{"taskId":"c{i}","type":"coding","description":"d","priority":"normal","createdBy":"human"}}"#
                ),
            );
        }
        wait_until(60, "every task to complete", || (0..6).all(|i| t.status_of(&format!("c{i}")) == "completed"));
        // Every task was traced (trace.json made) and its spans were dropped, counted.
        assert!(t.root.join("tasks/c0/trace.json").is_file());
        wait_until(30, "the dropped spans to be counted", || {
            let m = metrics(&t);
            counter(&m, "dropped_export_failed") + counter(&m, "dropped_queue_full") >= 6
        });
        let m = metrics(&t);
        assert_eq!(counter(&m, "exported"), 0, "{what}: {m}");
        let log = d.output();
        assert_eq!(log.matches("spans cannot be sent to").count(), 1, "{what}: said once per outage:\n{log}");
        // doctor names the endpoint that does not take spans.
        let doc = t.run(&["--config", cfg.to_str().unwrap(), "--json", "doctor"]);
        let checks = doc.json();
        let tel = checks.as_array().unwrap().iter().find(|c| c["check"] == "telemetry").unwrap();
        assert_eq!(tel["level"], "fail", "{what}: {tel}");
        assert!(tel["detail"].as_str().unwrap().contains("spans cannot be sent"), "{tel}");
        let started = std::time::Instant::now();
        assert_eq!(d.stop(), 0, "{what}");
        assert!(started.elapsed() < Duration::from_secs(15), "{what}: the stop waited {:?}", started.elapsed());
    }
}

#[test]
fn bad_telemetry_settings_stop_the_daemon_and_name_the_key() {
    let t = Tree::init();
    for (section, key) in [
        ("otlp_endpoint = \"grpc://c:4317\"", "telemetry.otlp_endpoint"),
        ("otlp_endpoint = \"http://c:4318\"\nprotocol = \"grpc\"", "telemetry.protocol"),
        ("otlp_endpoint = \"http://c:4318\"\nsample_ratio = 2.0", "telemetry.sample_ratio"),
        (
            "otlp_endpoint = \"http://c:4318\"\nheaders = { authorization = { env = \"A\", file = \"/k\" } }",
            "telemetry.headers.authorization",
        ),
        ("otlp_endpoint = \"http://c:4318\"\nendpoint = \"x\"", "endpoint"),
    ] {
        let cfg = t.config(&format!("[telemetry]\n{section}\n"));
        let before = t.snapshot();
        let r = t.run(&["--config", cfg.to_str().unwrap(), "daemon"]);
        r.expect_code(2);
        assert!(r.stderr.contains(key), "{section}: {}", r.stderr);
        assert!(r.stderr.contains("clawboard.toml"), "the file is named: {}", r.stderr);
        assert_eq!(t.snapshot(), before, "{section}: nothing changed");
    }
}

/// An HTTP role is sent its run's span as the W3C `traceparent` header, in the
/// task's trace (the collector here is down: the trace is made all the same).
#[test]
fn an_http_role_gets_its_runs_traceparent() {
    // A real HTTP server that answers with the header it got.
    let server = clawboard_tests::HttpRole::start(r#""traceparent %s" % self.headers.get("traceparent")"#);
    let t = Tree::init();
    t.config(&sh_config(&format!(
        "\n[roles.reviewer]\nhttp = {{ url = \"http://127.0.0.1:{}/run\" }}\ntimeout = \"10s\"\n\n[telemetry]\notlp_endpoint = \"{}\"\n",
        server.port,
        closed_port()
    )));
    let d = t.daemon();
    t.drop_task(
        "h1.json",
        r#"{"taskId":"h1","type":"coding","description":"use-http","priority":"normal","createdBy":"human"}"#,
    );
    wait_until(30, "h1 to end", || matches!(t.status_of("h1").as_str(), "completed" | "failed"));
    drop(server);
    assert_eq!(t.status_of("h1"), "completed", "{}", d.output());
    let (trace, _) = trace_of(&t.root, "h1");
    let result = std::fs::read_to_string(t.root.join("tasks/h1/result.json")).unwrap();
    assert!(result.contains(&format!("traceparent 00-{trace}-")), "{result}");
    assert_eq!(d.stop(), 0);
}
