//! `clawboard run` killed with `kill -9` in the middle of a blueprint: the real
//! binary, its write-ahead log (`.clawboard/wal.log`, records gathered in memory
//! and written at each step's sync) and a real daemon that takes the tree over.
//! The daemon writes out what the log holds, resumes the task at its first
//! unfinished step, and no step that had finished runs again or finishes twice.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use clawboard_tests::{Tree, wait_until};
use serde_json::Value;

const STEPS: usize = 12;

/// A linear blueprint of [`STEPS`] steps; each role run appends its step to
/// `runs.log` after a short sleep (so a kill lands between steps and within them)
/// and prints a line of text, its step's result (a run with no text is no success).
fn setup(t: &Tree) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let bp_dir = clawboard_tests::blueprints::linear_blueprint(t, STEPS, "kill test");
    let runs = t.dir.path().join("runs.log");
    let config = format!(
        r#"[daemon]
shutdown_grace = "2s"

[blueprints]
dir = "{}"

[roles.step]
command = ["sh", "-c", "ctx=$(cat); sleep 0.03; printf '%s\n' \"$ctx\" | grep -o '\"step\":\"[^\"]*\"' >> '{}'; echo '{{\"output\": \"a step of the kill test\"}}'"]
timeout = "30s"
max_retries = 0
"#,
        bp_dir.display(),
        runs.display()
    );
    let cfg = t.config(&config);
    let input = t.scratch("in.json", br#"{"user_input": {"topic": "kill", "platform": "general"}}"#);
    (cfg.to_str().unwrap().to_owned(), input, runs)
}

/// How many role runs of each step `runs.log` holds.
fn runs_by_step(runs: &std::path::Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        let step = line.trim_start_matches("\"step\":\"").trim_end_matches('"').to_owned();
        *n.entry(step).or_insert(0) += 1;
    }
    n
}

#[test]
fn a_run_killed_mid_blueprint_is_finished_by_the_daemon_and_no_finished_step_runs_again() {
    let t = Tree::init();
    let (cfg, input, runs) = setup(&t);
    let mut child = t
        .command(&["--config", &cfg, "run", "linear", "--input", input.to_str().unwrap()])
        .env("CLAWBOARD_LOG", "clawboard_roles::engine::call=debug")
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
    // Killed right after it logs the start of step 6: steps 1-5 ended, and their
    // ends were made durable by the sync that came before that line.
    let (mut task, mut started) = (None, 0usize);
    while started < 6 {
        let line = rx.recv_timeout(Duration::from_secs(120)).expect("clawboard run logged no step 6 within 120 s");
        if let Some(rest) = line.strip_prefix("task ") {
            task.get_or_insert_with(|| rest.split(':').next().unwrap().to_owned());
        }
        if line.contains("starting a run")
            && let Some(n) = line.split("step=bp/s").nth(1).and_then(|s| s.split_whitespace().next())
        {
            started = started.max(n.parse().unwrap());
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let task = task.expect("clawboard run named no task");
    // On disk it is `running`, or still `pending` if the log held that change.
    assert!(["pending", "running"].contains(&t.status_of(&task).as_str()), "{}", t.status_of(&task));

    // A daemon takes the tree over: it writes out the log and resumes the task.
    let d = t.daemon();
    wait_until(120, "the resumed task to complete", || t.status_of(&task) == "completed");
    assert_eq!(d.stop(), 0);

    let attempts = t.attempts(&task);
    let mut ok: BTreeMap<String, usize> = BTreeMap::new();
    for a in &attempts {
        if a["status"] == "ok" {
            *ok.entry(a["step"].as_str().unwrap().to_owned()).or_insert(0) += 1;
        }
    }
    let ran = runs_by_step(&runs);
    for i in 1..=STEPS {
        let step = format!("bp/s{i}");
        assert_eq!(ok.get(&step), Some(&1), "{step}: not exactly one ok attempt: {attempts:#?}");
        let n = ran.get(&step).copied().unwrap_or(0);
        if i < started {
            assert_eq!(n, 1, "{step} had finished before the kill and ran again: {ran:?}");
        } else {
            // The step running at the kill may have finished in its orphaned process too.
            assert!((1..=2).contains(&n), "{step} ran {n} times: {ran:?}");
        }
    }
    assert!(ran.values().filter(|n| **n == 2).count() <= 1, "more than one step ran twice: {ran:?}");
    let result: Value =
        serde_json::from_slice(&std::fs::read(t.root.join("tasks").join(&task).join("result.json")).unwrap()).unwrap();
    let out = &result["output"]["execution_result"];
    assert_eq!(out["status"], "success", "{result:#}");
    assert_eq!(out["steps_executed"].as_array().unwrap().len(), STEPS, "{result:#}");
    // The log was emptied: a new epoch, so the records left in the file are void.
    let wal = std::fs::read(t.root.join(".clawboard/wal.log")).unwrap();
    let head: Value = serde_json::from_slice(wal[..64].trim_ascii_end()).unwrap();
    let first = wal[64..].split(|b| *b == b'\n').next().unwrap();
    if let Ok(record) = serde_json::from_slice::<Value>(first) {
        assert_ne!(record["epoch"], head["epoch"], "a record of the current epoch is left in the log: {record}");
    }
    // Its replay matches the recording: the resume restated no finished step on the board.
    let r = t.command(&["--config", &cfg, "task", "replay", &task]).output().unwrap();
    let shown = format!("{}{}", String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&r.stderr));
    assert_eq!(r.status.code(), Some(0), "{shown}");
}
