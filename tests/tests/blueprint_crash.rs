//! The blueprint crash test (issue 16): 100 blueprint tasks through a daemon
//! killed with SIGKILL three times while tasks are mid-run, restarted each time.
//! The example roles (scripts/roles/writing.py) are deterministic, so in the end
//! every task's `final_content` is byte for byte the one an uninterrupted daemon
//! produces from the same input, and no step of any task finished twice.
//!
//! The 100 tasks are 20 distinct inputs (5 topics × the 4 seed blueprints), each
//! dropped 5 times; the reference is one uninterrupted daemon, same config, on a
//! fresh tree, running the 20 distinct inputs once.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::time::{Duration, Instant};

use clawboard_tests::{Tree, repo};
use serde_json::{Value, json};

/// The four seed blueprints, a short name for task ids, and the platforms their
/// inputs cycle through (deep_analysis on `general` skips its `cta` step).
const BLUEPRINTS: [(&str, &str, [&str; 2]); 4] = [
    ("xiaohongshu_viral", "xhs", ["xiaohongshu", "xiaohongshu"]),
    ("wechat_longform", "wx", ["wechat", "general"]),
    ("twitter_thread", "tw", ["twitter", "twitter"]),
    ("deep_analysis", "deep", ["general", "wechat"]),
];
/// One per domain of writing.py, and one it has no table for.
const TOPICS: [&str; 5] = ["秋冬护肤", "健身减脂入门", "AI效率工具", "年轻人理财", "读书习惯养成"];
const COPIES: usize = 5;
const TASKS: usize = BLUEPRINTS.len() * TOPICS.len() * COPIES;
/// Kill when at least this many tasks are completed.
const KILL_AT: [usize; 3] = [20, 45, 70];

/// config/examples/blueprints.toml as shipped, with absolute role paths, the
/// interpreter `python3` resolves to (not a version manager's shim, which costs
/// more than the role itself) run with `-S`, a short retry backoff and a short
/// shutdown grace.
fn config() -> String {
    let text = std::fs::read_to_string(repo().join("config/examples/blueprints.toml")).unwrap();
    for needle in [
        "\"python3\", \"scripts/roles/writing.py\"",
        "retry_backoff = \"100ms\"",
        "shutdown_grace = \"10s\"",
        "[lifecycle]",
    ] {
        assert!(text.contains(needle), "config/examples/blueprints.toml no longer has {needle}");
    }
    let py = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    let py = String::from_utf8(py.stdout).unwrap().trim().to_owned();
    assert!(!py.is_empty(), "python3 does not say where it is");
    // -S: no site-packages (the roles use the standard library only), whose `.pth` files can cost more than the role.
    text.replace("\"python3\",", &format!("{}, \"-S\",", serde_json::to_string(&py).unwrap()))
        .replace("\"scripts/roles/", &format!("\"{}/scripts/roles/", repo().display()))
        .replace("retry_backoff = \"100ms\"", "retry_backoff = \"10ms\"")
        .replace("shutdown_grace = \"10s\"", "shutdown_grace = \"2s\"")
}

/// A distinct input: (blueprint index, topic index).
type Key = (usize, usize);

fn keys() -> Vec<Key> {
    (0..BLUEPRINTS.len()).flat_map(|b| (0..TOPICS.len()).map(move |t| (b, t))).collect()
}

fn task_body(id: &str, (b, t): Key) -> String {
    let (bp, _, platforms) = BLUEPRINTS[b];
    json!({
        "taskId": id,
        "type": "writing",
        "description": format!("blueprint crash test: {}", TOPICS[t]),
        "blueprint_id": bp,
        "user_input": {"topic": TOPICS[t], "platform": platforms[t % 2]},
    })
    .to_string()
}

fn crash_id((b, t): Key, copy: usize) -> String {
    format!("{}-t{t}-c{copy}", BLUEPRINTS[b].1)
}

fn ref_id((b, t): Key) -> String {
    format!("ref-{}-t{t}", BLUEPRINTS[b].1)
}

/// What the comparison reads of one finished task.
struct Finished {
    /// `serde_json::to_vec` of `output.final_content` (key order preserved).
    final_content: Vec<u8>,
    /// The steps with an `ok` attempt, sorted (a step twice appears twice).
    ok_steps: Vec<String>,
    output: Value,
    attempts: Vec<Value>,
}

/// The task's result and attempts, or why they cannot be read.
fn finished(t: &Tree, id: &str) -> Result<Finished, String> {
    let path = t.root.join("tasks").join(id).join("result.json");
    let bytes = std::fs::read(&path).map_err(|e| format!("{id}: result.json: {e}"))?;
    let result: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{id}: result.json does not parse: {e}"))?;
    let output = result["output"].clone();
    if !output.is_object() {
        return Err(format!("{id}: result.json has no output contract: {result}"));
    }
    let final_content = serde_json::to_vec(&output["final_content"]).unwrap();
    let attempts = t.attempts(id);
    let mut ok_steps: Vec<String> =
        attempts.iter().filter(|a| a["status"] == "ok").map(|a| a["step"].as_str().unwrap().to_owned()).collect();
    ok_steps.sort();
    Ok(Finished { final_content, ok_steps, output, attempts })
}

/// An attempt record with its raw output beside it (`.stdout`, `.stderr`; absent when empty).
fn shown(t: &Tree, id: &str, a: &Value) -> String {
    let stem = format!("{:04}-{}", a["number"].as_u64().unwrap(), a["role"].as_str().unwrap());
    let dir = t.root.join("tasks").join(id).join("attempts");
    let raw = |ext: &str| match std::fs::read(dir.join(format!("{stem}.{ext}"))) {
        Ok(b) => format!("{:?}", String::from_utf8_lossy(&b[..b.len().min(300)])),
        Err(_) => "(no file: empty)".to_owned(),
    };
    format!("{a}\n    stdout: {}\n    stderr: {}", raw("stdout"), raw("stderr"))
}

/// A part of the output contract without what differs between any two runs:
/// the elapsed time, and the order in which parallel steps finished.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("execution_time_ms");
        if let Some(Value::Array(steps)) = o.get_mut("steps_executed") {
            steps.sort_by_key(Value::to_string);
        }
    }
    v
}

/// The paths where `a` and `b` differ (objects by key, whatever their order).
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                differences(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}.{k}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => {
            let short = |v: &Value| v.to_string().chars().take(160).collect::<String>();
            out.push(format!("{path}: {} (want {})", short(a), short(b)));
        }
        _ => {}
    }
}

/// Polls `cond` every 250 ms (reading 100 task files is not free) until it holds;
/// panics with `what` after `secs`.
fn poll(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// How many of `ids` are completed, and which are claimed but not completed.
fn count_status(t: &Tree, ids: &[String]) -> (usize, Vec<String>) {
    let mut completed = 0;
    let mut under_way = Vec::new();
    for id in ids {
        match t.status_of(id).as_str() {
            "completed" => completed += 1,
            "" => {}
            _ => under_way.push(id.clone()),
        }
    }
    (completed, under_way)
}

/// Every `.json` under `dir` that is not a temp file parses; returns how many temp files were left.
fn all_json_parses(dir: &Path, problems: &mut Vec<String>) -> usize {
    let mut temps = 0;
    for e in walkdir::WalkDir::new(dir).into_iter().filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.file_type().is_file() {
            continue;
        }
        if clawboard_core::store::is_temp_name(&name) {
            temps += 1;
            println!("temp file left: {}", e.path().display());
            continue;
        }
        if name.ends_with(".json") {
            let bytes = std::fs::read(e.path()).unwrap();
            if let Err(err) = serde_json::from_slice::<Value>(&bytes) {
                problems.push(format!(
                    "{} is half-written or not JSON ({err}): {:?}",
                    e.path().display(),
                    String::from_utf8_lossy(&bytes)
                ));
            }
        }
    }
    temps
}

/// Panics with every problem found; with `CLAWBOARD_TEST_KEEP` set, keeps both trees (daemon logs included).
fn report(problems: &[String], trees: Vec<Tree>) {
    if problems.is_empty() {
        return;
    }
    if std::env::var_os("CLAWBOARD_TEST_KEEP").is_some() {
        for t in trees {
            println!("kept {}", t.dir.keep().display());
        }
    }
    let shown: Vec<&str> = problems.iter().take(20).map(String::as_str).collect();
    panic!("{} problems (the first {}):\n\n{}", problems.len(), shown.len(), shown.join("\n\n"));
}

#[test]
fn blueprints_through_three_kill_dash_nines_match_an_uninterrupted_run() {
    let cfg = config();
    clawboard_tests::bin(); // built (if need be) before the clock starts
    let started = Instant::now();
    let mut problems = Vec::new();

    // The reference: the 20 distinct inputs through one daemon that is never killed.
    let reference = Tree::init();
    reference.config(&cfg);
    let d = reference.daemon();
    for k in keys() {
        reference.drop_task(&format!("{}.json", ref_id(k)), &task_body(&ref_id(k), k));
    }
    let ref_ids: Vec<String> = keys().into_iter().map(ref_id).collect();
    poll(300, "every reference task to complete", || count_status(&reference, &ref_ids).0 == ref_ids.len());
    assert_eq!(d.stop(), 0);
    let mut want: BTreeMap<Key, Finished> = BTreeMap::new();
    for k in keys() {
        let id = ref_id(k);
        let f = finished(&reference, &id).unwrap();
        assert_eq!(f.output["execution_result"]["status"], "success", "{id}: {}", f.output["execution_result"]);
        for a in &f.attempts {
            if a["status"] != "ok" {
                problems.push(format!("{id} (uninterrupted): a run that is not ok: {}", shown(&reference, &id, a)));
            }
        }
        want.insert(k, f);
    }
    let reference_took = started.elapsed();
    println!("reference: {} tasks in {reference_took:?}", want.len());

    // The crash run: 100 tasks, the daemon killed three times mid-run.
    let t = Tree::init();
    t.config(&cfg);
    let staging = t.dir.path().join("burst");
    std::fs::create_dir_all(&staging).unwrap();
    let mut ids: Vec<(String, Key)> = Vec::new();
    for copy in 0..COPIES {
        for k in keys() {
            let id = crash_id(k, copy);
            std::fs::write(staging.join(format!("{id}.json")), task_body(&id, k)).unwrap();
            ids.push((id, k));
        }
    }
    assert_eq!(ids.len(), TASKS);
    let all: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
    let mut seed = std::collections::hash_map::RandomState::new().build_hasher().finish() | 1;
    println!("random seed {seed}");
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };

    let crash_started = Instant::now();
    let mut d = Some(t.daemon());
    for (id, _) in &ids {
        std::fs::rename(staging.join(format!("{id}.json")), t.root.join(format!("inbox/{id}.json"))).unwrap();
    }
    let mut kills = Vec::new();
    let mut half_run = BTreeSet::new();
    for (round, at) in KILL_AT.into_iter().enumerate() {
        poll(300, &format!("{at} tasks to complete before crash {}", round + 1), || count_status(&t, &all).0 >= at);
        std::thread::sleep(Duration::from_millis(next() % 400));
        let (done, under_way) = count_status(&t, &all);
        println!(
            "crash {} at {:?} ({}): {done} of {TASKS} completed, {} under way",
            round + 1,
            crash_started.elapsed(),
            chrono::Utc::now().format("%H:%M:%S%.3f"),
            under_way.len()
        );
        d.take().unwrap().crash();
        // Blueprints cut between their steps: some steps finished, no result yet.
        for id in &under_way {
            let ok = t
                .attempts(id)
                .iter()
                .filter(|a| a["status"] == "ok" && a["step"].as_str().unwrap().starts_with("bp/"))
                .count();
            if ok > 0 && !t.root.join("tasks").join(id).join("result.json").exists() {
                half_run.insert(id.clone());
            }
        }
        kills.push((done, under_way));
        d = Some(t.daemon());
    }
    poll(300, "every task to complete after the crashes", || count_status(&t, &all).0 == TASKS);
    assert_eq!(d.take().unwrap().stop(), 0);
    let crash_took = crash_started.elapsed();
    println!("crash run: {TASKS} tasks in {crash_took:?}");

    // Three real crashes, each with tasks left to do and some under way.
    for (i, (done, under_way)) in kills.iter().enumerate() {
        assert!(*done > 0 && *done < TASKS, "crash {}: {done} completed", i + 1);
        assert!(!under_way.is_empty(), "crash {}: no task under way", i + 1);
    }

    let mut interrupted = 0;
    let mut resumed_mid_blueprint = BTreeSet::new();
    let mut other_diffs = Vec::new();
    for (id, k) in &ids {
        let got = match finished(&t, id) {
            Ok(f) => f,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let reference = &want[k];
        if got.output["execution_result"]["status"] != "success" {
            problems.push(format!("{id}: execution_result {}", got.output["execution_result"]));
        }
        if got.final_content != reference.final_content {
            problems.push(format!(
                "{id}: final_content differs from the uninterrupted run's ({})\n--- got\n{}\n--- want\n{}",
                ref_id(*k),
                String::from_utf8_lossy(&got.final_content),
                String::from_utf8_lossy(&reference.final_content),
            ));
        }

        // No step finished twice, and the same steps finished as in the uninterrupted run.
        let runs = &got.attempts;
        let mut seen = BTreeSet::new();
        for s in &got.ok_steps {
            if !seen.insert(s) {
                let twice: Vec<String> =
                    runs.iter().filter(|a| a["step"] == s.as_str()).map(|a| shown(&t, id, a)).collect();
                problems.push(format!("{id}: step {s} finished twice:\n  {}", twice.join("\n  ")));
            }
        }
        if got.ok_steps != reference.ok_steps {
            problems.push(format!(
                "{id}: other steps finished than in the uninterrupted run:\n  got  {:?}\n  want {:?}",
                got.ok_steps, reference.ok_steps
            ));
        }
        for a in runs {
            if a["status"] != "ok" && a["status"] != "interrupted" {
                problems.push(format!("{id}: {}", shown(&t, id, a)));
            }
        }

        // A blueprint cut in the middle: a step interrupted after others had finished, then resumed.
        for (i, a) in runs.iter().enumerate() {
            if a["status"] != "interrupted" {
                continue;
            }
            interrupted += 1;
            let step = a["step"].as_str().unwrap();
            let done_before =
                runs[..i].iter().any(|b| b["status"] == "ok" && b["step"].as_str().unwrap().starts_with("bp/"));
            let finished_after = runs[i + 1..].iter().any(|b| b["status"] == "ok" && b["step"] == step);
            if step.starts_with("bp/") && done_before && finished_after {
                resumed_mid_blueprint.insert(id.clone());
            }
        }

        // Not asked by the issue, reported: the rest of the output contract.
        let crashed = kills.iter().any(|(_, under_way)| under_way.contains(id));
        for part in ["execution_result", "blackboard_snapshot", "quality_report"] {
            let mut at = Vec::new();
            differences(&comparable(&got.output[part]), &comparable(&reference.output[part]), part, &mut at);
            if !at.is_empty() {
                other_diffs.push(format!(
                    "{id}{}: {}",
                    if crashed { " (under way at a crash)" } else { " (never under way at a crash)" },
                    at.join(", ")
                ));
            }
        }
    }
    println!("{interrupted} role runs were interrupted by the crashes");
    println!("{} blueprints were cut between steps by a crash: {half_run:?}", half_run.len());
    println!(
        "{} of them had a step cut short too (after others had finished): {resumed_mid_blueprint:?}",
        resumed_mid_blueprint.len()
    );
    println!("{} tasks differ outside final_content:", other_diffs.len());
    for d in &other_diffs {
        println!("  {d}");
    }
    if interrupted == 0 {
        problems.push("no crash cut a role run short".into());
    }
    if half_run.is_empty() {
        problems.push("no crash cut a blueprint between its steps".into());
    }

    // No half-written file anywhere in either tree's tasks, nothing left over.
    let temps = all_json_parses(&t.root.join("tasks"), &mut problems)
        + all_json_parses(&reference.root.join("tasks"), &mut problems);
    println!("{temps} temp files left under tasks/");
    assert_eq!(std::fs::read_dir(t.root.join(".clawboard/active")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(t.root.join("tasks")).unwrap().count(), TASKS);
    assert_eq!(std::fs::read_dir(t.root.join("inbox/rejected")).unwrap().count(), 0);
    println!("total {:?} (reference {reference_took:?}, crash run {crash_took:?})", started.elapsed());
    report(&problems, vec![reference, t]);
}
