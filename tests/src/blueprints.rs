//! What the blueprint tests share (tests/tests/blueprints.rs and
//! blueprint_middleware.rs): the example config with patched roles, a blueprint
//! task, a daemon run of one, and the views of its output, board, attempts and
//! status page.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{Tree, repo, wait_until};

// --- the config -------------------------------------------------------------

/// config/examples/blueprints.toml with the scripts' paths absolute, a 50 ms
/// backoff for every role and a 2 s shutdown grace; `roles` patches roles (TOML
/// keys replacing the role's own), `extra` is merged in at the top (e.g. a
/// `[blueprints]` section).
pub fn config(roles: &[(&str, &str)], extra: &str) -> String {
    let text = std::fs::read_to_string(repo().join("config/examples/blueprints.toml")).unwrap();
    let mut doc: toml::Table = text.parse().unwrap();
    doc.get_mut("daemon").unwrap().as_table_mut().unwrap().insert("shutdown_grace".into(), "2s".into());
    for (_, role) in doc.get_mut("roles").unwrap().as_table_mut().unwrap().iter_mut() {
        let role = role.as_table_mut().unwrap();
        if let Some(cmd) = role.get_mut("command").and_then(toml::Value::as_array_mut) {
            for arg in cmd.iter_mut() {
                if let Some(s) = arg.as_str().filter(|s| s.starts_with("scripts/")) {
                    *arg = repo().join(s).display().to_string().into();
                }
            }
        }
        role.insert("retry_backoff".into(), "50ms".into());
    }
    for (id, patch) in roles {
        let patch: toml::Table = patch.parse().unwrap_or_else(|e| panic!("patch of {id}: {e}\n{patch}"));
        let roles = doc.get_mut("roles").unwrap().as_table_mut().unwrap();
        let role = roles.get_mut(*id).unwrap_or_else(|| panic!("no role {id}")).as_table_mut().unwrap();
        for (k, v) in patch {
            role.insert(k, v);
        }
    }
    let extra: toml::Table = extra.parse().unwrap();
    merge(&mut doc, extra);
    toml::to_string(&doc).unwrap()
}

pub fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

pub fn writing_py() -> String {
    repo().join("scripts/roles/writing.py").display().to_string()
}

// --- tasks and what they left ----------------------------------------------

/// A blueprint task's file for `inbox/`.
pub fn bp_task(id: &str, blueprint: &str, user_input: Value, execution_config: Option<Value>) -> String {
    let mut t = json!({"taskId": id, "type": "writing", "description": user_input["topic"],
                       "blueprint_id": blueprint, "user_input": user_input});
    if let Some(c) = execution_config {
        t["execution_config"] = c;
    }
    t.to_string()
}

pub fn xhs_input() -> Value {
    json!({"topic": "秋冬护肤", "platform": "xiaohongshu"})
}

/// Waits until the task ends; its status (`completed` or `failed`).
pub fn wait_task(t: &Tree, id: &str, secs: u64) -> String {
    wait_until(secs, &format!("task {id} to end"), || matches!(t.status_of(id).as_str(), "completed" | "failed"));
    t.status_of(id)
}

pub fn task_dir(t: &Tree, id: &str) -> PathBuf {
    t.root.join("tasks").join(id)
}

pub fn read_json(p: &Path) -> Value {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The output contract in the task's result.json.
pub fn output_of(t: &Tree, id: &str) -> Value {
    let r = read_json(&task_dir(t, id).join("result.json"));
    assert!(r["output"].is_object(), "result.json has no output: {r:#}");
    r["output"].clone()
}

pub fn board_of(t: &Tree, id: &str) -> Value {
    read_json(&task_dir(t, id).join("board/board.json"))
}

/// `control_zone.errors` of the task's board as (step_id, error_type, message).
pub fn errors_of(t: &Tree, id: &str) -> Vec<(String, String, String)> {
    board_of(t, id)["control_zone"]["errors"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["step_id"].as_str().unwrap().to_owned(),
                e["error_type"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `steps_executed` as (step_id, status).
pub fn executed(out: &Value) -> Vec<(String, String)> {
    out["execution_result"]["steps_executed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step_id"].as_str().unwrap().to_owned(), s["status"].as_str().unwrap().to_owned()))
        .collect()
}

pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

/// The one `steps_executed` entry of `step` (panics unless there is exactly one).
pub fn step_entry(out: &Value, step: &str) -> Value {
    let all: Vec<&Value> =
        out["execution_result"]["steps_executed"].as_array().unwrap().iter().filter(|s| s["step_id"] == step).collect();
    assert_eq!(all.len(), 1, "steps_executed has {} entries for {step}: {all:#?}", all.len());
    all[0].clone()
}

/// The attempts of executor step `step` as (role, status, error).
pub fn attempts_of(t: &Tree, id: &str, step: &str) -> Vec<(String, String, String)> {
    t.attempts(id)
        .iter()
        .filter(|a| a["step"] == step)
        .map(|a| {
            (
                a["role"].as_str().unwrap().to_owned(),
                a["status"].as_str().unwrap().to_owned(),
                a["error"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The rows of status.md's `## Blueprint {id}` table.
pub fn status_table(t: &Tree, task: &str, blueprint: &str) -> Vec<(String, String)> {
    let md = std::fs::read_to_string(task_dir(t, task).join("status.md")).unwrap();
    let head = format!("## Blueprint {blueprint}\n\n| step | state |\n| --- | --- |\n");
    let at = md.find(&head).unwrap_or_else(|| panic!("status.md has no blueprint table:\n{md}"));
    md[at + head.len()..]
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].to_owned(), cells[1].to_owned())
        })
        .collect()
}

/// Problems of `out` against config/schemas/blueprint-output.schema.json.
pub fn schema_problems(out: &Value) -> Vec<String> {
    let schema = read_json(&repo().join("config/schemas/blueprint-output.schema.json"));
    clawboard_core::schema::validate(&schema, out).iter().map(ToString::to_string).collect()
}

/// The contract's structural parts checked by hand as well (the schema says them
/// too; this guards against a schema that says less than the seed).
pub fn check_contract(out: &Value) {
    let problems = schema_problems(out);
    assert!(problems.is_empty(), "the output breaks the schema: {problems:#?}");
    let obj = out.as_object().unwrap();
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, ["execution_result", "blackboard_snapshot", "quality_report", "final_content"]);
    let er = &out["execution_result"];
    assert!(["success", "partial", "failed"].contains(&er["status"].as_str().unwrap()), "{er}");
    for s in er["steps_executed"].as_array().unwrap() {
        assert!(["worker", "skill"].contains(&s["component_type"].as_str().unwrap()), "{s}");
        assert!(["completed", "skipped", "failed", "retried"].contains(&s["status"].as_str().unwrap()), "{s}");
    }
    let snap = out["blackboard_snapshot"].as_object().unwrap();
    let zones: Vec<&str> = snap.keys().map(String::as_str).collect();
    assert_eq!(zones, ["meta_zone", "content_zone", "control_zone"]);
    let q = &out["quality_report"];
    for k in ["overall_score", "virality_score"] {
        let x = q[k].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&x), "{k} {x}");
    }
    // A check reports a verdict, or is named among the checks that did not run.
    let not_run = q["checks_not_run"].as_array().map(|a| a.iter().map(|x| x.as_str().unwrap()).collect::<Vec<_>>());
    for k in ["sensitive_filter_passed", "platform_compliance"] {
        let check = k.trim_end_matches("_passed");
        let named = not_run.as_ref().is_some_and(|n| n.iter().any(|x| x.starts_with(&format!("{check}:"))));
        assert!(q[k].is_boolean() != named, "{k}: a verdict, or named in checks_not_run (not both): {q}");
    }
    assert!(out["final_content"]["title"].is_string() && out["final_content"]["body"].is_string());
}

pub fn improvements(out: &Value) -> Vec<String> {
    out["quality_report"]["improvements_applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// Runs one xiaohongshu task through a daemon with `cfg`; returns the tree (kept
/// for inspection) and the task's end status. The daemon is stopped cleanly.
pub fn run_one(cfg: &str, id: &str, user_input: Value, exec: Option<Value>) -> (Tree, String) {
    let t = Tree::init();
    t.config(cfg);
    let d = t.daemon();
    t.drop_task(&format!("{id}.json"), &bp_task(id, "xiaohongshu_viral", user_input, exec));
    let status = wait_task(&t, id, 120);
    assert_eq!(d.stop(), 0);
    (t, status)
}

/// A linear blueprint `linear` of `steps` steps `s1`…, each run by the role
/// `step` on the board's `meta.topic`, in the tree's `blueprints/`; returns
/// that directory (for `[blueprints] dir`).
pub fn linear_blueprint(t: &Tree, steps: usize, description: &str) -> PathBuf {
    let dir = t.dir.path().join("blueprints");
    std::fs::create_dir_all(&dir).unwrap();
    let steps: Vec<Value> = (1..=steps)
        .map(|i| serde_json::json!({"id": format!("s{i}"), "worker": "step", "scope": ["meta.topic"]}))
        .collect();
    let bp = serde_json::json!({"blueprint_id": "linear", "type": "static_linear", "description": description, "steps": steps});
    std::fs::write(dir.join("linear.json"), bp.to_string()).unwrap();
    dir
}

/// Each step of a `task replay --json` report with its verdict (`same`, `input_differs`, …).
pub fn verdicts(report: &Value) -> Vec<(String, String)> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step"].as_str().unwrap().to_owned(), s["verdict"].as_str().unwrap().to_owned()))
        .collect()
}
