//! The demo's blueprint task (seed 001): one `xiaohongshu_viral` run by the
//! daemon with the example roles of scripts/roles/writing.py: three competing
//! titles, the winner's sensitive word fixed by the middleware, one quality
//! round, and each step's slice beside what full-context passing would send.

use std::collections::BTreeMap;
use std::path::Path;

use clawboard_core::formats::{BoardFile, TaskResult};
use clawboard_core::{RelPath, Store, layout};
use serde_json::Value;

/// The blueprint roles' part of the demo config: the roles of
/// `config/examples/blueprints.toml`, run as `script` (the demo's copy of writing.py).
pub fn config(script: &str) -> String {
    let text = include_str!("../../../../../config/examples/blueprints.toml");
    let from = text.find("[roles.content-curator]").unwrap_or(text.len());
    text[from..].replace("\"scripts/roles/writing.py\"", &format!("{script:?}"))
}

/// The task the demo drops: a writing task naming the blueprint.
pub fn task(id: &str) -> Value {
    serde_json::json!({
        "taskId": id, "type": "writing",
        "description": "A xiaohongshu post on autumn skin care",
        "blueprint_id": "xiaohongshu_viral",
        "user_input": {
            "topic": "秋冬护肤", "platform": "xiaohongshu", "style": "casual",
            "constraints": {"word_count": {"min": 200, "max": 600}, "must_include": ["保湿"]}
        },
        "execution_config": {"quality_threshold": 75}
    })
}

fn board(store: &Store, id: &str) -> Option<BoardFile> {
    store.read(&RelPath::new(&layout::task_file(id, "board/board.json")).ok()?).ok()
}

/// Prints each blueprint step's state as it changes (from the board's `control.step_status`).
pub fn follow(store: &Store, id: &str, seen: &mut BTreeMap<String, String>, say: &dyn Fn(&str)) {
    let Some(b) = board(store, id) else { return };
    let Some(steps) = b.control_zone.get("step_status").and_then(Value::as_object) else { return };
    let round = b.control_zone.get("iteration_count").and_then(Value::as_u64).unwrap_or(1);
    for (step, state) in steps {
        // The blueprint's own steps: not the executor's keys per candidate
        // (`title-c2`) or round (`r2-body`), nor the validator's and harvest's.
        let executor_key = step.contains("-c")
            || step.starts_with('r') && step[1..].starts_with(|c: char| c.is_ascii_digit())
            || step.starts_with("iter-")
            || step == "harvest";
        if executor_key {
            continue;
        }
        let Some(state) = state.as_str() else { continue };
        let shown = format!("{state} (round {round})");
        if seen.get(step) != Some(&shown) {
            say(&format!("{id:<22} blueprint step {step:<9} {state}"));
            seen.insert(step.clone(), shown);
        }
    }
}

/// What the blueprint task produced: the titles, the fix, the rounds, the slices. True when it succeeded.
pub fn summary(store: &Store, root: &Path, id: &str) -> anyhow::Result<bool> {
    let result: TaskResult = store.read(&RelPath::new(&layout::task_file(id, layout::RESULT_FILE))?)?;
    let Some(out) = result.extra.get("output") else {
        outln!("  tasks/{id}/  no blueprint output: {}", result.summary)?;
        return Ok(false);
    };
    let status = out["execution_result"]["status"].as_str().unwrap_or("?");
    outln!("  tasks/{id}/  blueprint xiaohongshu_viral: {status}; result.json holds the output contract")?;
    let content = &out["blackboard_snapshot"]["content_zone"];
    if let Some(variants) = content["hook"]["variants"].as_array() {
        for v in variants {
            outln!("    title candidate  {:>4}  {}", v["score"], v["content"].as_str().unwrap_or_default())?;
        }
        outln!("    selected         {}", content["hook"]["selected"].as_str().unwrap_or_default())?;
    }
    let report = &out["quality_report"];
    for line in report["improvements_applied"].as_array().into_iter().flatten() {
        outln!("    improvement      {}", line.as_str().unwrap_or_default())?;
    }
    outln!(
        "    quality          virality {} (threshold 75), sensitive filter passed: {}, platform compliance: {}",
        report["virality_score"],
        report["sensitive_filter_passed"],
        report["platform_compliance"]
    )?;
    let entries = clawboard_board::ledger::list(store, id)?;
    outln!("    slices (o200k tokens; full context = the whole board with every earlier output):")?;
    outln!("      {:<18} {:<18} {:>6} {:>13}", "step", "role", "slice", "full context")?;
    let (mut slices, mut full) = (0, 0);
    for e in entries.iter().filter(|e| e.step.starts_with("bp/")) {
        let whole = e.full_tokens.map_or("-".to_owned(), |n| n.to_string());
        outln!("      {:<18} {:<18} {:>6} {:>13}", e.step, e.role, e.tokens, whole)?;
        slices += e.tokens;
        full += e.full_tokens.unwrap_or(0);
    }
    if full > 0 {
        outln!(
            "      {:<18} {:<18} {:>6} {:>13}  ({:.0}% of full context)",
            "total",
            "",
            slices,
            full,
            slices as f64 * 100.0 / full as f64
        )?;
    }
    // The live board keeps only the winner's text (the run cleared the rest at
    // its end); the history keeps every draft, with the role that wrote it.
    outln!("    see: clawboard --root {} board history {id} content.hook.variants", root.display())?;
    Ok(status == "success")
}
