//! `clawboard role try`: one role run on its own on a sample task, as the
//! lifecycle would run it: what it was handed, what it printed, and whether it
//! is accepted (exit 0) or not and why (exit 1); bad input exits 2. Real role
//! processes (the example roles in scripts/roles, and scripts written here).

use clawboard_tests::{Run, Tree};

/// A config with the example team and `extra` roles.
fn config(t: &Tree, extra: &str) -> String {
    let team = std::fs::read_to_string(clawboard_tests::repo().join("config/examples/local.toml")).unwrap();
    t.config(&format!("{team}\n{extra}")).display().to_string()
}

fn role_try(t: &Tree, cfg: &str, args: &[&str]) -> Run {
    let mut all = vec!["--config", cfg, "role", "try"];
    all.extend_from_slice(args);
    t.run(&all)
}

#[test]
fn a_good_pm_and_worker_are_accepted_and_shown_what_they_were_handed() {
    let t = Tree::init();
    let cfg = config(&t, "");
    let r = role_try(&t, &cfg, &["coding-pm", "--task", "config/examples/task.json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("== handed to coding-pm (step pm)\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\"availableRoles\""), "{}", r.stdout);
    assert!(r.stdout.contains("== accepted: the lifecycle reads it as a pm step's output"), "{}", r.stdout);

    let r = role_try(&t, &cfg, &["analyst", "--task", "config/examples/task.json", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["kind"], "team");
    assert_eq!(v["status"], "exited");
    assert_eq!(v["context"]["step"], "iter-1/analyst");
    assert_eq!(v["context"]["task"]["description"], "Add a --dry-run flag to the deploy script and document it");
    assert!(v["accepted"]["summary"].as_str().unwrap().starts_with("analyst handled: "), "{v:#}");
    assert!(v.get("refused").is_none(), "{v:#}");
    // The configured tree is not touched: no task was made.
    assert!(std::fs::read_dir(t.root.join("tasks")).unwrap().next().is_none());
}

#[test]
fn a_role_printing_the_wrong_shape_is_refused_naming_the_field() {
    let t = Tree::init();
    let script = t.dir.path().join("shape.py");
    std::fs::write(&script, "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'result': 'done'}))\n").unwrap();
    let cfg = config(&t, &format!("[roles.shaper]\ncommand = [\"python3\", {:?}]\n", script.display().to_string()));
    let r = role_try(&t, &cfg, &["shaper", "--task", "config/examples/task.json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("{\n  \"result\": \"done\"\n}"), "what it printed is shown: {}", r.stdout);
    assert!(r.stdout.contains("== not accepted: stdout /: missing field `summary`"), "{}", r.stdout);

    // The example validator, tried at its own step (the kind its config gives it).
    let r = role_try(&t, &cfg, &["validator", "--task", "config/examples/task.json", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["kind"], "validator");
}

#[test]
fn a_missing_program_and_bad_input_are_named() {
    let t = Tree::init();
    let cfg = config(&t, "[roles.ghost]\ncommand = [\"/nonexistent/clawboard-no-such-program\"]\n");
    let r = role_try(&t, &cfg, &["ghost", "--task", "config/examples/task.json", "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "failed");
    let why = v["refused"].as_str().unwrap();
    assert!(
        why.starts_with("the run did not succeed: ") && why.contains("/nonexistent/clawboard-no-such-program"),
        "{why}"
    );

    for (args, says) in [
        (vec!["nobody", "--task", "config/examples/task.json"], "role \"nobody\" is not configured under [roles]"),
        (vec!["analyst", "--task", "/nonexistent/task.json"], "/nonexistent/task.json"),
        (vec!["analyst", "--task", "config/examples/blueprint-input.json"], "config/examples/blueprint-input.json"),
    ] {
        let r = role_try(&t, &cfg, &args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}
