//! The lifecycle with real role processes (small `sh` programs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use clawboard_core::formats::{Task, TaskStatus, Validation};
use clawboard_core::{RelPath, Store};
use clawboard_records::attempts::{self, AttemptStatus};
use clawboard_records::escalations;
use clawboard_roles::config::LifecycleConfig;
use clawboard_roles::{Engine, Outcome, RoleConfig, RolesConfig, Shutdown, claims, intake};

fn sh(script: &str) -> RoleConfig {
    let mut r: RoleConfig = serde_json::from_value(serde_json::json!({"command": ["sh", "-c", script]})).unwrap();
    r.retry_backoff = std::time::Duration::from_millis(10);
    r.timeout = std::time::Duration::from_secs(10);
    r
}

fn config(roles: &[(&str, RoleConfig)]) -> RolesConfig {
    let mut lifecycle = LifecycleConfig::default();
    lifecycle.pm_for_type.insert(clawboard_core::formats::TaskType::Coding, "pm".into());
    lifecycle.validator = Some("validator".into());
    lifecycle.harvester = Some("harvester".into());
    let mut map: BTreeMap<String, RoleConfig> = BTreeMap::new();
    map.insert("pm".into(), sh(r#"printf '{"team":[{"role":"w1","priority":1},{"role":"w2","priority":1},{"role":"w3","priority":2}],"reasoning":"r"}'"#));
    for w in ["w1", "w2", "w3"] {
        map.insert(w.into(), sh(&format!(r#"printf '{{"summary":"{w} did it"}}'"#)));
    }
    // Fails the first iteration, passes the second.
    map.insert("validator".into(), sh(r#"if grep -q '"iteration":1,' ; then printf '{"score":4,"pass":false,"issues":[{"severity":"major","description":"too thin"}]}'; else printf '{"score":9,"pass":true}'; fi"#));
    map.insert(
        "harvester".into(),
        sh(r#"printf '{"experiences":[{"roleId":"w1","cells":[{"type":"insight","content":"c","value":0.5}]}]}'"#),
    );
    for (k, v) in roles {
        map.insert((*k).into(), v.clone());
    }
    let c = RolesConfig { lifecycle, roles: map, ..Default::default() };
    c.check().unwrap();
    c
}

fn submit(d: &std::path::Path, store: &Store, id: &str) {
    std::fs::write(
        d.join(format!("inbox/{id}.json")),
        format!(r#"{{"taskId":"{id}","type":"coding","description":"d"}}"#),
    )
    .unwrap();
    assert_eq!(
        intake::take_inbox_file(store, &format!("{id}.json"), &clawboard_blueprint::Catalog::default()).unwrap(),
        intake::Intake::Accepted(id.into())
    );
}

fn task(store: &Store, id: &str) -> Task {
    store.read(&RelPath::new(&format!("tasks/{id}/task.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_goes_through_every_step_and_iterates() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    submit(d.path(), &store, "t1");
    let engine = Engine::new(store.clone(), config(&[]), Shutdown::never());
    assert_eq!(engine.drive("t1").await.unwrap(), Outcome::Completed);
    let t = task(&store, "t1");
    assert_eq!(t.status, TaskStatus::Completed);
    assert!(t.completed_at.is_some());
    let v: Validation = store.read(&RelPath::new("tasks/t1/validation.json").unwrap()).unwrap();
    assert_eq!((v.iterations, v.result.pass), (2, true));
    for f in ["team-composition.json", "result.json", "memory-harvest.json", "status.md"] {
        assert!(d.path().join("tasks/t1").join(f).exists(), "{f}");
    }
    // pm + 2 × (3 workers + validator) + harvester
    let runs = attempts::load(&store, "t1").unwrap();
    assert_eq!(runs.len(), 10);
    assert!(runs.iter().all(|a| a.status == AttemptStatus::Ok));
    let queue = std::fs::read_to_string(d.path().join("roles/memory-queue.json")).unwrap();
    assert!(queue.contains("\"roleId\": \"w1\""), "{queue}");
    let active = std::fs::read_to_string(d.path().join("roles/active.json")).unwrap();
    assert!(!active.contains("inst-"), "{active}");
    assert!(claims::active(&store).unwrap().is_empty());
    // Driving it again does nothing.
    assert_eq!(engine.drive("t1").await.unwrap(), Outcome::Completed);
    assert_eq!(attempts::load(&store, "t1").unwrap().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_pass_score_the_validators_score_decides_not_its_pass() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    submit(d.path(), &store, "ps");
    // Scores 8 and says it fails; 8 is over the pass score: the first round passes.
    let mut c = config(&[("validator", sh(r#"printf '{"score":8,"pass":false}'"#))]);
    c.lifecycle.pass_score = Some(6.0);
    let engine = Engine::new(store.clone(), c, Shutdown::never());
    assert_eq!(engine.drive("ps").await.unwrap(), Outcome::Completed);
    let v: Validation = store.read(&RelPath::new("tasks/ps/validation.json").unwrap()).unwrap();
    assert_eq!((v.iterations, v.result.pass, v.result.score), (1, true, 8.0));
    // Scores 5 and says it passes; 5 is under it: every round fails.
    submit(d.path(), &store, "ps2");
    let mut c = config(&[("validator", sh(r#"printf '{"score":5,"pass":true}'"#))]);
    c.lifecycle.pass_score = Some(6.0);
    let engine = Engine::new(store.clone(), c, Shutdown::never());
    assert!(matches!(engine.drive("ps2").await.unwrap(), Outcome::Failed(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_roles_retry_then_fall_back_or_fail() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let mut garbage = sh("echo not json; echo oops >&2");
    garbage.max_retries = 1;
    garbage.fallback = Some("skill".into());
    let mut broken = sh("exit 7");
    broken.max_retries = 2;
    let cfg = config(&[("w1", garbage), ("skill", sh(r#"printf '{"summary":"skill did it"}'"#)), ("w3", broken)]);
    submit(d.path(), &store, "t2");
    let engine = Engine::new(store.clone(), cfg, Shutdown::never());
    let out = engine.drive("t2").await.unwrap();
    let Outcome::Failed(reason) = out else { panic!("{out:?}") };
    assert!(reason.contains("iter-1/w3") && reason.contains("exited with code 7"), "{reason}");
    let runs = attempts::load(&store, "t2").unwrap();
    let w1: Vec<_> = runs.iter().filter(|a| a.role == "w1").collect();
    assert_eq!(w1.len(), 2, "one run and one retry");
    assert!(w1[0].error.as_deref().unwrap().starts_with("invalid output"), "{:?}", w1[0].error);
    assert_eq!(runs.iter().filter(|a| a.role == "skill" && a.status == AttemptStatus::Ok).count(), 1);
    assert_eq!(runs.iter().filter(|a| a.role == "w3").count(), 3);
    let t = task(&store, "t2");
    assert_eq!(t.status, TaskStatus::Failed);
    let result = std::fs::read_to_string(d.path().join("tasks/t2/result.json")).unwrap();
    assert!(result.contains("\"partial\": true"), "{result}");
    let log = std::fs::read_to_string(d.path().join("tasks/t2/errors.log")).unwrap();
    assert!(log.contains("stderr: oops"), "{log}");
    // Raw output of every attempt is kept.
    assert!(d.path().join(format!("tasks/t2/attempts/{}.stdout", w1[0].file_stem())).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_escalation_holds_the_task_until_decided() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    // Asks for approval in the first iteration only.
    let esc = sh(
        r#"if grep -q '"step":"iter-1/'; then printf '{"summary":"need ok","escalations":[{"level":"high","issue":"deploy to prod?","requiresHumanApproval":true}]}'; else printf '{"summary":"done"}'; fi"#,
    );
    let cfg = config(&[("w2", esc)]);
    submit(d.path(), &store, "t3");
    submit(d.path(), &store, "t4");
    let engine = Engine::new(store.clone(), cfg, Shutdown::never());
    let Outcome::Held(ids) = engine.drive("t3").await.unwrap() else { panic!() };
    assert_eq!(ids.len(), 1);
    let page = std::fs::read_to_string(d.path().join("tasks/t3/status.md")).unwrap();
    assert!(page.contains("Waiting for a human") && page.contains(&ids[0]), "{page}");
    assert_eq!(engine.drive("t3").await.unwrap(), Outcome::Held(ids.clone()), "still undecided");
    escalations::decide(&store, &ids[0], clawboard_core::formats::Decision::Approved, "human", None).unwrap();
    assert_eq!(engine.drive("t3").await.unwrap(), Outcome::Completed);
    // The approved step did not run again.
    let runs = attempts::load(&store, "t3").unwrap();
    assert_eq!(runs.iter().filter(|a| a.role == "w2").count(), 2, "once per iteration");

    let Outcome::Held(ids) = engine.drive("t4").await.unwrap() else { panic!() };
    escalations::decide(&store, &ids[0], clawboard_core::formats::Decision::Rejected, "human", Some("not now"))
        .unwrap();
    let Outcome::Failed(reason) = engine.drive("t4").await.unwrap() else { panic!() };
    assert!(reason.contains("was rejected by human: not now"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timeout_is_a_failed_attempt() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let mut slow = sh("sleep 20");
    slow.timeout = std::time::Duration::from_millis(200);
    slow.max_retries = 0;
    submit(d.path(), &store, "t5");
    let engine = Engine::new(store.clone(), config(&[("w3", slow)]), Shutdown::never());
    let Outcome::Failed(reason) = engine.drive("t5").await.unwrap() else { panic!() };
    assert!(reason.contains("timed out"), "{reason}");
    let runs = attempts::load(&store, "t5").unwrap();
    assert_eq!(runs.iter().filter(|a| a.status == AttemptStatus::TimedOut).count(), 1);
}

/// roles/active.json is a view written without fsync: the daemon's start clears it,
/// and one a power loss left empty or torn is started afresh, not an error.
#[test]
fn a_damaged_active_list_is_started_afresh() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let path = d.path().join("roles/active.json");
    let two = r#"{"instances": [
        {"id": "inst-a", "role": "w1", "taskId": "t1", "startedAt": "2026-11-25T00:00:00Z", "status": "running"},
        {"id": "inst-b", "role": "w2", "taskId": "t1", "startedAt": "2026-11-25T00:00:00Z", "status": "running"}]}"#;
    std::fs::write(&path, two).unwrap();
    assert_eq!(clawboard_roles::clear_active_instances(&store).unwrap(), 2);
    for damaged in ["", "{\"instances\": [{\"id\": \"inst-a\""] {
        std::fs::write(&path, damaged).unwrap();
        assert_eq!(clawboard_roles::clear_active_instances(&store).unwrap(), 0);
        let now: clawboard_core::formats::ActiveInstances =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(now.instances.is_empty());
    }
}

/// An `llm` role whose server asks for a longer wait than `max_wait` allows: its
/// attempt fails at once, its retries are skipped (each would be refused the
/// same way), and the step goes to the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_asks_for_a_long_wait_sends_the_step_to_its_fallback() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { continue };
            let mut buf = [0; 65536];
            let _ = sock.read(&mut buf);
            // Completions only (the runner also asks once which models the server has).
            if buf.starts_with(b"POST") {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let body = r#"{"error":{"message":"rate limited"}}"#;
            let _ = write!(
                sock,
                "HTTP/1.1 429 Too Many Requests\r\nretry-after: 120\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let mut busy: RoleConfig = serde_json::from_value(serde_json::json!({
        "llm": {"base_url": base, "model": "m", "max_wait": "60s"},
        "max_retries": 3,
        "fallback": "skill",
        "retry_backoff": "10ms",
    }))
    .unwrap();
    busy.timeout = std::time::Duration::from_secs(10);
    let cfg = config(&[("w1", busy), ("skill", sh(r#"printf '{"summary":"skill did it"}'"#))]);
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    submit(d.path(), &store, "t5");
    let engine = Engine::new(store.clone(), cfg, Shutdown::never());
    assert_eq!(engine.drive("t5").await.unwrap(), Outcome::Completed);
    let runs = attempts::load(&store, "t5").unwrap();
    let w1: Vec<_> = runs.iter().filter(|a| a.role == "w1").collect();
    // Once per iteration (the validator asks for two): never a retry.
    assert_eq!(w1.len(), 2, "{w1:?}");
    assert!(
        w1[0].error.as_deref().unwrap().contains("Retry-After 120s, longer than max_wait (60s)"),
        "{:?}",
        w1[0].error
    );
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(runs.iter().filter(|a| a.role == "skill" && a.status == AttemptStatus::Ok).count(), 2);
}

/// A slice within its budget in o200k but over it in the model's own count (a
/// tokenizer here that counts every character) is cut again before anything is
/// sent; the superseded cut stays in the ledger as `recut`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_over_budget_in_the_models_count_is_cut_again() {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { continue };
            let mut r = BufReader::new(sock);
            let (mut head, mut len) = (String::new(), 0);
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push_str(&line);
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let (status, reply) = if head.starts_with("POST /tokenize ") {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let n = v["content"].as_str().unwrap().chars().count();
                ("200 OK", serde_json::json!({"tokens": vec![1; n]}).to_string())
            } else if head.starts_with("POST /v1/chat/completions ") {
                let c = serde_json::json!({"choices": [{"message": {"content": "{\"summary\":\"ok\",\"output\":\"x\"}"}, "finish_reason": "stop"}],
                                           "usage": {"prompt_tokens": 9, "completion_tokens": 3}});
                ("200 OK", c.to_string())
            } else {
                ("404 Not Found", "{}".to_owned())
            };
            let _ = write!(
                r.get_mut(),
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    let mut w1: RoleConfig = serde_json::from_value(serde_json::json!({
        "llm": {"base_url": base, "model": "m"}, "scope": ["meta.intent"], "max_tokens": 120, "max_retries": 0,
    }))
    .unwrap();
    w1.llm.as_mut().unwrap().count_tokens = clawboard_roles::config::CountTokens::LlamaCpp;
    let cfg = config(&[("w1", w1)]);
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    // About 100 o200k tokens of intent, some 500 characters: over 120 in the model's count.
    let description = "the quick brown fox jumps over the lazy dog ".repeat(11);
    std::fs::write(
        d.path().join("inbox/t9.json"),
        serde_json::json!({"taskId": "t9", "type": "coding", "description": description}).to_string(),
    )
    .unwrap();
    intake::take_inbox_file(&store, "t9.json", &clawboard_blueprint::Catalog::default()).unwrap();
    let engine = Engine::new(store.clone(), cfg, Shutdown::never());
    engine.drive("t9").await.unwrap();
    let ledger = clawboard_board::ledger::list(&store, "t9").unwrap();
    let w1: Vec<_> = ledger.iter().filter(|e| e.role == "w1").collect();
    assert!(w1.iter().any(|e| e.outcome == "recut"), "{w1:#?}");
    let sent: Vec<_> = w1.iter().filter(|e| e.outcome == "ok").collect();
    assert!(!sent.is_empty(), "{w1:#?}");
    for e in sent {
        assert!(e.model_tokens.unwrap() <= 120, "sent over budget in the model's count: {e:#?}");
        assert!(e.rungs.iter().any(|r| r.starts_with("model_count:")), "{e:#?}");
        assert_eq!(e.budget, Some(120));
    }
}

/// An entry's role runs through the same executor as a step: each run recorded
/// in `.clawboard/lanes/{id}/attempts/`; a run found finished (after a restart)
/// is not run again; one a crash cut short is recorded as interrupted; a chain
/// that keeps failing ends with the last reason and one line per run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_call_records_its_runs_and_a_finished_one_is_not_run_again() {
    use clawboard_roles::engine::entry::{EntryCall, EntryRun};
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let count = d.path().join("count");
    let counting = sh(&format!(r#"cat >/dev/null; echo x >> {}; printf '{{"note":"n"}}'"#, count.display()));
    let mut failing = sh("cat >/dev/null; echo boom >&2; exit 3");
    failing.max_retries = 1;
    let engine = Engine::new(store.clone(), config(&[("bot", counting), ("broken", failing)]), Shutdown::never());
    let id = clawboard_core::Id::new("p-l-1").unwrap();
    let call = |role| EntryCall {
        role,
        entry_id: &id,
        step: "l/Bot".into(),
        context: serde_json::json!({"entry": {"id": "p-l-1"}}),
        shape: clawboard_roles::reply::ReplyShape::default(),
    };
    let accept = |out: &[u8]| if out.starts_with(b"{") { Ok(()) } else { Err("not an object".to_owned()) };

    // A record a crash left `running`, from before.
    let dir = attempts::entry_attempts_dir("p-l-1");
    let cut: attempts::Attempt = serde_json::from_value(serde_json::json!({
        "number": 1, "step": "l/Bot", "role": "bot", "instanceId": "inst-000000",
        "startedAt": "2026-01-01T00:00:00Z", "status": "running"
    }))
    .unwrap();
    attempts::save_in(&store, &dir, &cut).unwrap();
    store.sync_records().unwrap();

    let EntryRun::Done { stdout, runs } = engine.run_for_entry(call("bot"), accept).await.unwrap() else {
        panic!("the run failed")
    };
    assert_eq!(stdout, br#"{"note":"n"}"#);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[0].contains("(0001-bot): interrupted"), "{runs:?}");
    assert!(runs[1].ends_with("(0002-bot): ok"), "{runs:?}");
    // Run again (a replay after a crash before the output was applied): the
    // finished run's output, and the role does not run a second time.
    let EntryRun::Done { stdout: again, .. } = engine.run_for_entry(call("bot"), accept).await.unwrap() else {
        panic!("the replay failed")
    };
    assert_eq!(again, stdout);
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "x\n");
    let recorded = attempts::load_in(&store, &dir).unwrap();
    let statuses: Vec<AttemptStatus> = recorded.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [AttemptStatus::Interrupted, AttemptStatus::Ok]);

    let other = clawboard_core::Id::new("p-l-2").unwrap();
    let failed =
        engine.run_for_entry(EntryCall { role: "broken", entry_id: &other, ..call("broken") }, accept).await.unwrap();
    let EntryRun::Failed { error, runs } = failed else { panic!("{failed:?}") };
    assert!(error.contains("broken: exited with code 3"), "{error}");
    assert_eq!(runs.len(), 2, "{runs:?}");
    let dir = attempts::entry_attempts_dir("p-l-2");
    assert_eq!(std::fs::read_to_string(store.root().join(&dir).join("0002-broken.stderr")).unwrap().trim(), "boom");
    // An unknown role is named.
    let none = clawboard_core::Id::new("p-l-3").unwrap();
    let missing = engine.run_for_entry(EntryCall { entry_id: &none, ..call("nobody") }, accept).await.unwrap();
    assert!(
        matches!(&missing, EntryRun::Failed { error, .. } if error.contains("\"nobody\" is not configured")),
        "{missing:?}"
    );
}
