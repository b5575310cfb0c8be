//! Roles answered by a real language model: llama.cpp's server with Gemma 3
//! 270M, both built from registry packages by `scripts/llm-server`, which
//! `scripts/test` starts (its base URL in `CLAWBOARD_TEST_LLM`). The config is the
//! shipped `config/examples/llm.toml`, pointed at that server through the
//! environment as a user would (`CLAWBOARD_LLM_LOCAL_BASE_URL`).
//!
//! The tests assert on structure and records (statuses, attempt records, the slice
//! ledger, errors naming role and provider), never on the model's wording.

use std::path::PathBuf;

use clawboard_tests::blueprints::{output_of, read_json, task_dir, wait_task};
use clawboard_tests::{Tree, repo, wait_until};
use serde_json::{Value, json};

/// The local model server's base URL (`…/v1`).
fn server() -> String {
    std::env::var("CLAWBOARD_TEST_LLM")
        .expect("CLAWBOARD_TEST_LLM is not set: run the suite through scripts/test, which starts scripts/llm-server")
}

/// The environment that points `[llm.providers.local]` at the test server.
fn provider_env(base_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CLAWBOARD_LLM_LOCAL_BASE_URL", base_url.to_owned()),
        ("CLAWBOARD_LLM_LOCAL_MODEL", "gemma-3-270m".to_owned()),
    ]
}

/// The daemon on the tree's config, its provider pointed at the test server.
fn daemon_on_model(t: &Tree) -> clawboard_tests::Daemon {
    let env = provider_env(&server());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    t.daemon_with_env(&env)
}

/// The shipped config, with `extra` TOML merged over it (tables key by key).
fn llm_config(t: &Tree, extra: &str) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join("config/examples/llm.toml")).unwrap();
    let mut table: toml::Table = toml::from_str(&shipped).unwrap();
    clawboard_tests::blueprints::merge(&mut table, toml::from_str(extra).unwrap());
    t.config(&toml::to_string(&table).unwrap())
}

/// A blueprint of its own in the tree's `bps/`: the `[blueprints]` config naming it.
fn blueprint_dir(t: &Tree, bp: &Value) -> String {
    let dir = t.dir.path().join("bps");
    std::fs::create_dir_all(&dir).unwrap();
    let id = bp["blueprint_id"].as_str().unwrap();
    std::fs::write(dir.join(format!("{id}.json")), bp.to_string()).unwrap();
    format!("[blueprints]\ndir = \"{}\"\n", dir.display())
}

/// A one-step blueprint that writes `content.cta` with the cta-worker: the
/// smallest real reply, for the fault tests.
fn one_step_blueprint(t: &Tree) -> String {
    blueprint_dir(
        t,
        &json!({"blueprint_id": "one_cta", "type": "static_linear", "steps": [
            {"id": "cta", "worker": "cta-worker", "scope": ["meta.topic", "meta.platform"], "max_tokens": 200,
             "output": "content.cta", "retry": 1}
        ]}),
    )
}

/// `clawboard run BLUEPRINT` with `config` and `env`; the run's exit code, output contract and stderr.
fn run_blueprint(t: &Tree, blueprint: &str, config: &str, env: &[(&str, String)]) -> (i32, Value, String) {
    let cfg = llm_config(t, config);
    let input = t.scratch("in.json", br#"{"topic": "Five AI tools for small teams", "platform": "xiaohongshu"}"#);
    let mut cmd = t.command(&["--config", cfg.to_str().unwrap(), "run", blueprint, "--input", input.to_str().unwrap()]);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let contract: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("run printed no contract ({e}):\n{stdout}\nstderr:\n{stderr}"));
    (out.status.code().unwrap_or(-1), contract, stderr)
}

/// `clawboard run one_cta` with `extra` config and `env`; the run's output contract.
fn run_one_cta(t: &Tree, extra: &str, env: &[(&str, String)]) -> (i32, Value) {
    let (code, contract, _) = run_blueprint(t, "one_cta", &format!("{}\n{extra}", one_step_blueprint(t)), env);
    (code, contract)
}

/// The slice ledger of a task (`clawboard slice history --json`).
fn ledger(t: &Tree, task: &str) -> Value {
    let r = t.run(&["slice", "history", task, "--json"]);
    r.ok();
    r.json()
}

/// Every slice sent was within its budget, in o200k and in the model's own
/// count; every finished model step has the provider's usage and the model's count.
fn check_ledger(ledger: &Value) -> usize {
    let entries = ledger["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "no slice was handed out: {ledger:#}");
    let mut counted = 0;
    for e in entries {
        let outcome = e["outcome"].as_str().unwrap();
        if matches!(outcome, "over_budget" | "recut") {
            continue; // never sent
        }
        if let Some(budget) = e["budget"].as_u64() {
            assert!(e["tokens"].as_u64().unwrap() <= budget, "sent over budget in o200k: {e:#}");
            if let Some(m) = e["model_tokens"].as_u64() {
                assert!(m <= budget, "sent over budget in the model's count: {e:#}");
            }
        }
        if outcome == "ok" {
            assert!(e["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > 0, "no provider usage: {e:#}");
            assert!(e["usage"]["completion_tokens"].as_u64().unwrap_or(0) > 0, "no provider usage: {e:#}");
            assert!(e["model_tokens"].as_u64().unwrap_or(0) > 0, "no model-token count: {e:#}");
            counted += 1;
        }
    }
    counted
}

/// xiaohongshu_viral through a daemon, every step on the model, with a `kill -9`
/// while a model step runs: the daemon that comes back resumes the task without
/// running its finished steps again, and the task ends with the output contract
/// (success, or partial with its reasons).
#[test]
fn a_blueprint_written_by_the_model_survives_a_kill_and_keeps_its_ledger() {
    let t = Tree::init();
    llm_config(&t, "[web]\nlisten = \"127.0.0.1:0\"\n");
    let d = daemon_on_model(&t);
    let input: Value =
        serde_json::from_slice(&std::fs::read(repo().join("config/examples/blueprint-input.json")).unwrap()).unwrap();
    // One quality round (threshold 0): the loop's rounds are the blueprints tests' to check.
    let mut exec = input["execution_config"].clone();
    exec["quality_threshold"] = json!(0);
    let task = json!({"taskId": "bp-model-1", "type": "writing", "description": input["user_input"]["topic"],
                      "blueprint_id": "xiaohongshu_viral", "user_input": input["user_input"],
                      "execution_config": exec});
    t.drop_task("bp-model-1.json", &task.to_string());

    // Once the planning steps are done and a later model step is running: kill -9.
    let finished_before =
        || -> Vec<Value> { t.attempts("bp-model-1").into_iter().filter(|a| a["status"] == "ok").collect::<Vec<_>>() };
    wait_until(600, "a finished step and a running one", || {
        let all = t.attempts("bp-model-1");
        all.iter().filter(|a| a["status"] == "ok").count() >= 2 && all.iter().any(|a| a["status"] == "running")
    });
    let done = finished_before();
    d.crash();
    let d = daemon_on_model(&t);
    let status = wait_task(&t, "bp-model-1", 1200);
    let page = task_page(&t, "bp-model-1");
    let log = d.output();
    d.stop();

    // Nothing that had finished ran again (attempts of its step before it, that
    // failed, are no re-run).
    let all = t.attempts("bp-model-1");
    for a in &done {
        let again: Vec<&Value> =
            all.iter().filter(|b| b["step"] == a["step"] && b["number"].as_u64() > a["number"].as_u64()).collect();
        assert!(again.is_empty(), "step {} ran again after the restart: {again:#?}", a["step"]);
    }
    assert!(
        all.iter().any(|a| a["status"] == "interrupted"),
        "the step the kill cut short is on the record as interrupted: {all:#?}"
    );

    let out = output_of(&t, "bp-model-1");
    let run_status = out["execution_result"]["status"].as_str().unwrap().to_owned();
    assert!(matches!(run_status.as_str(), "success" | "partial"), "status {run_status}: {out:#}\n{log}");
    if run_status == "partial" {
        let errors = &out["blackboard_snapshot"]["control_zone"]["errors"];
        assert!(!errors.as_array().unwrap().is_empty(), "a partial run says why: {out:#}");
    }
    // The validator (on the model too) may fail the result: the task then ends
    // failed with its verdict, the contract still written.
    assert!(matches!(status.as_str(), "completed" | "failed"), "{status}\n{log}");
    assert!(!out["final_content"]["title"].as_str().unwrap_or_default().is_empty(), "{out:#}");

    // Every model step: the provider's usage and the model's own count; no slice over budget.
    let counted = check_ledger(&ledger(&t, "bp-model-1"));
    assert!(counted >= 6, "curate, trends, the titles, body, score, cta, hashtags, adapt: {counted} counted");
    // The human view has the model's column.
    let table = t.run(&["slice", "history", "bp-model-1"]);
    assert!(table.stdout.contains("in the model's own tokens"), "{}", table.stdout);
    // So does the task page: each model step's group of bars has the model's own
    // count and the provider's, beside the slice and the whole board.
    for bar in ["bar-slice", "bar-model", "bar-provider", "bar-full"] {
        let drawn = page.matches(&format!("class=\"{bar}\"")).count();
        assert!(drawn >= counted, "{drawn} {bar} bars for {counted} counted steps:\n{page}");
    }
    assert!(page.contains("The provider counted"), "{page}");
}

/// The task page's content (`/tasks/{id}/fragment`), read as the page's script does.
fn task_page(t: &Tree, task: &str) -> String {
    use clawboard_tests::review::{http, web_addr};
    let token = t.run(&["web", "token"]).stdout.trim().to_owned();
    let r = http(
        &web_addr(t),
        "GET",
        &format!("/tasks/{task}/fragment"),
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// The team flow (seed 002) with every role on the model: the PM picks among
/// the configured roles, the workers, the validator and the harvester all answer
/// in their kind's shape.
#[test]
fn a_team_task_runs_with_every_role_on_the_model() {
    let t = Tree::init();
    llm_config(&t, "[lifecycle]\nmax_iterations = 1\n");
    let d = daemon_on_model(&t);
    let task = json!({"taskId": "team-model-1", "type": "writing", "priority": "normal", "createdBy": "human",
                      "description": "Write a two-line announcement of a new dark mode in the app"});
    t.drop_task("team-model-1.json", &task.to_string());
    let status = wait_task(&t, "team-model-1", 900);
    let log = d.output();
    d.stop();
    let dir = task_dir(&t, "team-model-1");
    let team = read_json(&dir.join("team-composition.json"));
    assert!(!team["team"].as_array().unwrap().is_empty(), "{team:#}");
    let attempts = t.attempts("team-model-1");
    // The harvest runs once the validator passed the result.
    let kinds: &[&str] = if status == "completed" { &["pm", "validator", "harvest"] } else { &["pm", "validator"] };
    for kind in kinds {
        assert!(
            attempts.iter().any(|a| a["step"].as_str().unwrap().ends_with(kind) && a["status"] == "ok"),
            "no finished {kind} step: {attempts:#?}\n{log}"
        );
    }
    // Every worker the PM picked ran, and answered in a worker's shape.
    for pick in team["team"].as_array().unwrap() {
        let role = pick["role"].as_str().unwrap();
        assert!(
            attempts.iter().any(|a| a["role"] == role && a["status"] == "ok"),
            "the PM's pick {role} did not finish: {attempts:#?}\n{log}"
        );
    }
    // Completed, or failed by its validator's verdict: either is a finished run, not a crash.
    assert!(matches!(status.as_str(), "completed" | "failed"), "{status}\n{log}");
    assert!(dir.join("validation.json").exists(), "{log}");
}

/// A reply that does not fit what the step writes is refused, and the step is
/// retried with the reason as feedback: here the role's own schema asks for a
/// text where the board holds an object.
#[test]
fn a_reply_that_does_not_fit_is_retried_with_the_reason() {
    let t = Tree::init();
    let misfit = "[roles.cta-worker.llm.reply_schema]\ntype = \"object\"\nrequired = [\"output\"]\n\
                  properties.output = { type = \"string\", maxLength = 40 }\n";
    let (code, out) = run_one_cta(&t, misfit, &provider_env(&server()));
    assert_ne!(code, 0, "{out:#}");
    assert_eq!(out["execution_result"]["status"], "failed", "{out:#}");
    let task = only_task(&t);
    let attempts = t.attempts(&task);
    let cta: Vec<&Value> = attempts.iter().filter(|a| a["role"] == "cta-worker").collect();
    assert_eq!(cta.len(), 2, "the first attempt and its one retry: {cta:#?}");
    for a in &cta {
        let err = a["error"].as_str().unwrap();
        assert!(err.starts_with("invalid output: stdout /output"), "{err}");
    }
    // The board keeps each refusal and the retry count.
    let board = read_json(&task_dir(&t, &task).join("board/board.json"));
    assert!(board["control_zone"]["errors"].as_array().unwrap().len() >= 2, "{board:#}");
}

/// The one task of a tree.
fn only_task(t: &Tree) -> String {
    let mut ids: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids.remove(0)
}

/// Faults of the model's server and of the role's limits: each fails the step
/// with an error that names the role and the provider, and loses nothing (the
/// task, its input and its attempt records stay).
#[test]
fn faults_fail_the_step_naming_role_and_provider() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let errors = http_500_server();
    let real = provider_env(&server());
    let with_base = |url: &str| vec![("CLAWBOARD_LLM_LOCAL_BASE_URL", url.to_owned())];
    let with_model = |m: &str| vec![real[0].clone(), ("CLAWBOARD_LLM_LOCAL_MODEL", m.to_owned())];
    // (what, config over the shipped one, the daemon's environment, what the error says)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, String)>, &'a str);
    let cases: Vec<Case> = vec![
        ("server down", "", with_base(&closed), "Connection refused"),
        (
            "a 500",
            "[llm.providers.local]\nhttp_retries = 1\n",
            with_base(&errors),
            "answered 500 Internal Server Error 2 times",
        ),
        ("a model it does not serve", "", with_model("no-such-model"), "does not serve the model \"no-such-model\""),
        ("a timeout", "[roles.cta-worker]\ntimeout = \"10ms\"\n", real.clone(), "timed out after 10ms"),
        (
            "a reply over max_output_bytes",
            "[roles.cta-worker]\nmax_output_bytes = 16\n",
            real.clone(),
            "max_output_bytes (16)",
        ),
        (
            "a reply cut off at the completion limit",
            "[roles.cta-worker.llm]\nmax_completion_tokens = 3\n",
            real.clone(),
            "cut off at the completion limit (max_tokens",
        ),
    ];
    for (what, extra, env, want) in cases {
        let t = Tree::init();
        let (code, out) = run_one_cta(&t, extra, &env);
        assert_ne!(code, 0, "{what}: {out:#}");
        assert_eq!(out["execution_result"]["status"], "failed", "{what}: {out:#}");
        let task = only_task(&t);
        let attempts = t.attempts(&task);
        assert!(!attempts.is_empty(), "{what}: no attempt record");
        for a in &attempts {
            assert_eq!(a["role"], "cta-worker", "{what}");
            let err = a["error"].as_str().unwrap_or_default();
            assert!(err.contains("provider local (") && err.contains(want), "{what}: {err}");
        }
        // Nothing lost: the task and its input stay, the diagnosis names the role.
        assert!(task_dir(&t, &task).join("task.json").exists(), "{what}");
        let body = out["final_content"]["body"].as_str().unwrap_or_default();
        assert!(body.contains("cta-worker"), "{what}: the diagnosis names the role: {body}");
    }
}

/// A server on 127.0.0.1 that answers every request with a 500.
fn http_500_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { continue };
            let mut buf = [0; 65536];
            let _ = sock.read(&mut buf);
            let body = r#"{"error": "the model crashed"}"#;
            let _ = write!(
                sock,
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    base
}

/// The Doc Update lap (seed 004) with every actor on the model: each actor's
/// reply is shaped by what it may write, so every hop is a well-formed entry of
/// an allowed kind to the next actor, and the lap ends with an entry to Human
/// (Gen's report, or Sho's refusal), each entry handled once.
#[test]
fn the_doc_update_lap_runs_with_every_actor_on_the_model() {
    let t = Tree::init();
    llm_config(&t, "");
    let dir = t.root.join("projects/vpm-mini/STATE");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("current_state.md"), "# current state\n\n## Changes\n- Phase 1 done\n").unwrap();
    let d = daemon_on_model(&t);
    let r = t.run(&[
        "--json",
        "entry",
        "new",
        "--project",
        "vpm-mini",
        "--issue",
        "571",
        "--from",
        "Human",
        "--to",
        "Aya",
        "--kind",
        "doc_update_proposal_request",
        "--summary",
        "Phase 2 is done: note it in the document",
        "--target-doc",
        "STATE/current_state.md#Changes",
    ]);
    r.ok();
    let list = |t: &Tree| -> Vec<Value> {
        let r = t.run(&["--json", "entry", "list"]);
        r.ok();
        r.json().as_array().unwrap().clone()
    };
    // Ended: an entry to Human from an actor, or one in error, and no actor's entry still open.
    wait_until(900, "the lap to end", || {
        let all = list(&t);
        let ended = all.iter().any(|e| (e["to"] == "Human" && e["from"] != "Human") || e["status"] == "error");
        ended
            && all.iter().filter(|e| e["to"] != "Human").all(|e| matches!(e["status"].as_str(), Some("done" | "error")))
    });
    let log = d.output();
    d.stop();
    let entries = list(&t);
    let chain: Vec<(String, String, String)> = entries
        .iter()
        .map(|e| {
            (e["from"].as_str().unwrap().into(), e["to"].as_str().unwrap().into(), e["kind"].as_str().unwrap().into())
        })
        .collect();
    let allowed = [
        ("Human", "Aya", "doc_update_proposal_request"),
        ("Aya", "Sho", "doc_update_review_request"),
        ("Sho", "Tsugu", "doc_update_apply_request"),
        ("Sho", "Human", "doc_update_error"),
        ("Tsugu", "Gen", "doc_update_report_request"),
        ("Gen", "Human", "doc_update_report"),
    ];
    for (from, to, kind) in &chain {
        assert!(
            allowed.iter().any(|(f, t, k)| f == from && t == to && k == kind),
            "a hop the lane does not allow: {from} -> {to} ({kind}); the chain: {chain:?}\n{log}"
        );
    }
    assert!(chain.len() >= 3, "Human -> Aya -> Sho -> ...: {chain:?}\n{log}");
    // Every entry an actor handled is done, from one applied record.
    for e in entries.iter().filter(|e| e["to"] != "Human") {
        assert_eq!(e["status"], "done", "{e:#}\n{log}");
        let id = e["id"].as_str().unwrap();
        let rec = read_json(&t.root.join(format!(".clawboard/lanes/{id}.json")));
        assert_eq!(rec["state"], "applied", "{rec:#}");
        // Each run of the actor's role has an attempt record; the last one's reply was taken.
        let records = clawboard_tests::entry_attempts(&t.root, id);
        assert_eq!(records.len(), rec["runs"].as_array().unwrap().len(), "{rec:#}");
        let (name, last) = records.last().unwrap();
        assert_eq!(last["status"], "ok", "{last:#}");
        let stdout = name.replace(".json", ".stdout");
        assert!(t.root.join(format!(".clawboard/lanes/{id}/attempts/{stdout}")).exists());
    }
    // Tsugu, when reached, wrote the document through the lane.
    if chain.iter().any(|(f, _, _)| f == "Tsugu") {
        let doc = std::fs::read_to_string(dir.join("current_state.md")).unwrap();
        assert_ne!(doc, "# current state\n\n## Changes\n- Phase 1 done\n", "Tsugu's edit is in the document");
    }
}

/// A one-step blueprint: two competing titles by the title-worker, the
/// hook-generator its fallback (as a writing team sets it up).
fn one_title_blueprint(t: &Tree) -> String {
    blueprint_dir(
        t,
        &json!({"blueprint_id": "one_title", "type": "static_linear", "steps": [
            {"id": "title", "worker": "title-worker", "scope": ["meta.topic", "meta.platform"], "max_tokens": 200,
             "output": "content.hook", "compete": 2, "selector": "max_score", "fallback": "hook-generator", "retry": 1}
        ]}),
    )
}

/// The runs' notes (`NNNN-ROLE.stderr` beside the attempt records) of `role`'s finished runs in `task`.
fn notes_of(t: &Tree, task: &str, role: &str) -> Vec<String> {
    let dir = task_dir(t, task).join("attempts");
    t.attempts(task)
        .iter()
        .filter(|a| a["role"] == role && a["status"] == "ok")
        .map(|a| {
            let path = dir.join(format!("{:04}-{role}.stderr", a["number"].as_u64().unwrap()));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// The servers users run, each on Gemma 3 270M (scripts/llm-server,
/// scripts/llm-servers): the title step is answered by the model itself on
/// each, in the reply format each takes, with the usage each reports; none
/// falls back. llama-cpp-python's is named as a user would (`gemma`, which its
/// `/models` does not list) and takes only `json_object` with a schema; the
/// LiteLLM proxy wants its key.
#[test]
fn the_title_step_is_answered_by_the_model_on_every_server() {
    let env =
        |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set: run the suite through scripts/test"));
    // (server, base URL, model, config over the shipped one, the daemon's environment, the format it takes)
    let servers = [
        ("llama.cpp", server(), "gemma-3-270m", String::new(), vec![], "json_schema"),
        (
            "llama-cpp-python",
            env("CLAWBOARD_TEST_LLM_PYTHON"),
            "gemma",
            "[llm.providers.local]\ncount_tokens = \"none\"\n".to_owned(),
            vec![],
            "json_object_schema",
        ),
        (
            "LiteLLM",
            env("CLAWBOARD_TEST_LLM_LITELLM"),
            "gemma-3-270m",
            "[llm.providers.local]\ncount_tokens = \"none\"\napi_key_env = \"LITELLM_KEY\"\n".to_owned(),
            vec![("LITELLM_KEY", env("CLAWBOARD_TEST_LLM_LITELLM_KEY"))],
            "json_schema",
        ),
    ];
    for (name, url, model, extra, mut vars, format) in servers {
        let t = Tree::init();
        vars.push(("CLAWBOARD_LLM_LOCAL_BASE_URL", url.clone()));
        vars.push(("CLAWBOARD_LLM_LOCAL_MODEL", model.to_owned()));
        let config = format!("{}\n{extra}", one_title_blueprint(&t));
        // A blueprint of a title alone ends `partial` (no body): the step is what is judged.
        let (_, out, stderr) = run_blueprint(&t, "one_title", &config, &vars);
        let step = &out["execution_result"]["steps_executed"][0];
        assert_eq!(
            step["component"], "title-worker",
            "{name}: the model answered, not the fallback: {step:#}\n{stderr}"
        );
        assert!(step.get("fallback").is_none(), "{name}: {step:#}");
        assert!(!stderr.contains("by fallback"), "{name}: {stderr}");
        let task = only_task(&t);
        let notes = notes_of(&t, &task, "title-worker");
        assert_eq!(notes.len(), 2, "{name}: both candidates answered: {notes:#?}");
        for n in &notes {
            assert!(n.contains(&format!("reply_format {format},")), "{name}: {n}");
            assert!(n.contains("\"completion_tokens\":"), "{name}: the usage is kept: {n}");
        }
        let counted = check_ledger(&ledger_usage(&t, &task));
        assert_eq!(counted, 2, "{name}: both candidates' usage in the ledger");
        // doctor asks the same and says which format the server takes.
        let cfg = t.dir.path().join("clawboard.toml");
        let mut doctor = t.command(&["--config", cfg.to_str().unwrap(), "doctor"]);
        doctor.envs(vars.iter().map(|(k, v)| (*k, v.as_str())));
        let r = clawboard_tests::Run::from(doctor.stdin(std::process::Stdio::null()).output().unwrap());
        let line = r.stdout.lines().find(|l| l.contains("model llm.providers.local")).unwrap_or_default();
        assert!(line.contains(&format!("answered with reply_format {format} in ")), "{name}: {}", r.stdout);
        let level = if format == "json_schema" { "ok" } else { "warn" };
        assert!(line.starts_with(level), "{name}: {line}");
    }
}

/// The slice ledger, checked for usage alone when the server counts no tokens.
fn ledger_usage(t: &Tree, task: &str) -> Value {
    let mut l = ledger(t, task);
    for e in l["entries"].as_array_mut().unwrap() {
        if e["outcome"] == "ok" && e.get("model_tokens").is_none_or(Value::is_null) {
            e["model_tokens"] = json!(1); // counted only by llama.cpp's /tokenize
        }
    }
    l
}

/// A title worker whose model is refused (llama.cpp answers a model it does
/// not serve with its own): no retry, the fallback writes the title at once,
/// and the run says so wherever its result is shown.
#[test]
fn a_step_its_fallback_answered_is_named_with_the_reason() {
    let t = Tree::init();
    let extra = "[web]\nlisten = \"127.0.0.1:0\"\n[llm.providers.elsewhere]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"no-such-model\"\n\
                 [roles.title-worker.llm]\nprovider = \"elsewhere\"\n";
    let mut vars = provider_env(&server());
    vars.push(("CLAWBOARD_LLM_ELSEWHERE_BASE_URL", server()));
    let (_, out, stderr) = run_blueprint(&t, "one_title", &format!("{}\n{extra}", one_title_blueprint(&t)), &vars);
    let step = &out["execution_result"]["steps_executed"][0];
    assert_eq!(step["component"], "hook-generator", "{step:#}");
    let why = step["fallback"].as_str().unwrap_or_else(|| panic!("no reason: {step:#}"));
    assert!(
        why.starts_with("title-worker: provider elsewhere (no-such-model): the server does not serve the model"),
        "{why}"
    );
    assert!(stderr.contains("title by fallback hook-generator: title-worker: provider elsewhere"), "{stderr}");
    let task = only_task(&t);
    let titles = t.attempts(&task).into_iter().filter(|a| a["role"] == "title-worker").count();
    assert_eq!(titles, 2, "one attempt per candidate, no retry of a refusal no retry changes");
    let result = read_json(&task_dir(&t, &task).join("result.json"));
    assert!(result["summary"].as_str().unwrap().contains("title by fallback hook-generator"), "{result:#}");
    // The task page names it too.
    let d = daemon_on_model(&t);
    let page = task_page(&t, &task);
    d.stop();
    assert!(page.contains("class=\"fallback\"") && page.contains("title by fallback hook-generator"), "{page}");
}

/// `clawboard role try` on a model role: the team's analyst of the shipped
/// config, asked by the model for the team step's shape, judged as the lifecycle would.
#[test]
fn a_model_role_is_tried_on_its_own_against_the_server() {
    let t = Tree::init();
    let cfg = llm_config(&t, "");
    let mut c = t.command(&[
        "--config",
        cfg.to_str().unwrap(),
        "--json",
        "role",
        "try",
        "analyst",
        "--task",
        "config/examples/task.json",
    ]);
    c.envs(provider_env(&server()));
    let r = clawboard_tests::Run::from(c.stdin(std::process::Stdio::null()).output().unwrap());
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!((v["kind"].as_str(), v["status"].as_str()), (Some("team"), Some("exited")), "{v:#}");
    assert!(v["stderr"].as_str().unwrap().contains("gemma-3-270m (provider local)"), "the run's note: {v:#}");
    assert!(v["accepted"]["summary"].as_str().is_some_and(|s| !s.is_empty()), "{v:#}");
    assert!(v["stdout"]["usage"]["completion_tokens"].as_u64().is_some(), "{v:#}");
}

/// A stand-in at the model server's address that only counts the connections made to it.
fn counting_listener() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    (url, count)
}

/// xiaohongshu_viral written by the model, then: its replay sends the model no
/// request and finds every step the same; with the title role's prompt edited, the
/// replay names the title steps and no step before them; a fork at the body step
/// with the winning title edited spends no model token on the steps before it and
/// runs the rest on the model.
#[test]
fn a_model_run_replays_for_no_request_and_forks_at_its_body_step() {
    let t = Tree::init();
    let env = provider_env(&server());
    let (_, _, stderr) = run_blueprint(&t, "xiaohongshu_viral", "", &env);
    let id = stderr.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
    assert!(task_dir(&t, &id).join("task.json").exists(), "{stderr}");
    let cfg = t.dir.path().join("clawboard.toml");
    let (dead, connections) = counting_listener();
    let replay = |config: &std::path::Path| {
        let mut cmd = t.command(&["--config", config.to_str().unwrap(), "task", "replay", &id, "--json"]);
        cmd.env("CLAWBOARD_LLM_LOCAL_BASE_URL", &dead).env("CLAWBOARD_LLM_LOCAL_MODEL", "gemma-3-270m");
        let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let report: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code().unwrap_or(-1), report)
    };
    let verdicts = clawboard_tests::blueprints::verdicts;
    let (code, same) = replay(&cfg);
    assert_eq!(code, 0, "{same:#}");
    assert!(verdicts(&same).iter().all(|(_, v)| v == "same"), "{:?}", verdicts(&same));
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0, "the replay asked the model server");

    // The shipped config with the title role's prompt edited, in a copy.
    let shipped = std::fs::read_to_string(&cfg).unwrap();
    let mut table: toml::Table = toml::from_str(&shipped).unwrap();
    let prompt = "[roles.title-worker.llm]\nsystem_prompt = \"Write one short title on the topic, no emoji. Score its pull 0-100.\"\n";
    clawboard_tests::blueprints::merge(&mut table, toml::from_str(prompt).unwrap());
    let edited_copy = t.scratch("edited.toml", toml::to_string(&table).unwrap().as_bytes());
    let (code, changed) = replay(&edited_copy);
    assert_eq!(code, 1, "{changed:#}");
    let v = verdicts(&changed);
    let first = v.iter().position(|(_, x)| x == "input_differs").unwrap_or_else(|| panic!("{v:?}"));
    assert!(v[first].0.contains("title"), "the first step that differs is a title step: {v:?}");
    assert!(v[..first].iter().all(|(_, x)| x == "same"), "no step before the titles: {v:?}");
    assert!(changed["steps"][first]["diff"].as_str().unwrap().contains("no emoji"), "{changed:#}");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0);

    // A fork at the body step, the winning title edited: the steps before it are
    // the recorded ones (no token spent on them), the body on runs on the model.
    let mut cmd = t.command(&[
        "--config",
        cfg.to_str().unwrap(),
        "task",
        "fork",
        &id,
        "--at",
        "bp/body",
        "--set",
        "content.hook.selected=\"秋冬护肤只做三件事\"",
        "--set",
        "content.hook.title=\"秋冬护肤只做三件事\"",
        "--run",
        "--json",
    ]);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let forked: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    let fork = forked["task"].as_str().unwrap().to_owned();
    let slices = ledger(&t, &fork);
    let entries = slices["entries"].as_array().unwrap();
    let reused: Vec<&Value> = entries.iter().filter(|e| e["reused"] == true).collect();
    assert!(reused.len() >= 4, "curate, trends and the titles were copied: {slices:#}");
    assert!(reused.iter().all(|e| !e["step"].as_str().unwrap().contains("body")), "{slices:#}");
    let body =
        entries.iter().find(|e| e["step"] == "bp/body" && e["reused"] != true).expect("the body ran in the fork");
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > 0, "the body ran on the model: {body:#}");
    let totals = &slices["totals"];
    assert_eq!(totals["reused_slices"].as_u64(), Some(reused.len() as u64), "{totals:#}");
    // The first body run (round 1's `bp/body`; a later round's body is handed that round's title).
    let first_body = t
        .attempts(&fork)
        .into_iter()
        .find(|a| a["step"] == "bp/body" && a.get("forkedFrom").is_none())
        .expect("the body ran in the fork");
    let stem = format!("{:04}-{}", first_body["number"].as_u64().unwrap(), first_body["role"].as_str().unwrap());
    let body_input =
        std::fs::read_to_string(task_dir(&t, &fork).join("attempts").join(format!("{stem}.input"))).unwrap();
    assert!(body_input.contains("秋冬护肤只做三件事"), "the body was handed the edited title: {body_input}");
}

/// A blueprint on the model with `[telemetry]` to Phoenix: one trace, its root
/// the task's workflow, an `invoke_agent` span per role run (attempt) under it,
/// a `chat gemma-3-270m` span under each model run, and each chat span's tokens
/// equal to the slice ledger's usage of that run.
#[test]
fn a_blueprint_on_the_model_is_one_trace_in_phoenix_with_the_ledgers_tokens() {
    use clawboard_tests::phoenix::{self, names, trace_of, wait_spans};
    let t = Tree::init();
    let bp = blueprint_dir(
        &t,
        &json!({"blueprint_id": "title_cta", "type": "static_linear", "steps": [
            {"id": "title", "worker": "title-worker", "scope": ["meta.topic", "meta.platform"], "max_tokens": 200,
             "output": "content.hook", "compete": 2, "selector": "max_score", "retry": 1},
            {"id": "cta", "worker": "cta-worker", "scope": ["meta.topic", "content.hook"], "max_tokens": 200,
             "output": "content.cta", "retry": 1}
        ]}),
    );
    let (_, _, stderr) =
        run_blueprint(&t, "title_cta", &format!("{bp}\n{}", phoenix::telemetry_config("")), &provider_env(&server()));
    let task = only_task(&t);
    let (trace, root) = trace_of(&t.root, &task);
    let attempts = t.attempts(&task);
    let model_runs = attempts.iter().filter(|a| a["status"] != "running").count();
    let spans = wait_spans(&trace, 60, |s| {
        s.iter().any(|s| s["context"]["span_id"] == root.as_str())
            && s.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("invoke_agent "))).count()
                >= model_runs
    });
    let attr = |s: &Value, k: &str| s["attributes"][k].clone();
    let root_span = spans.iter().find(|s| s["parent_id"].is_null()).unwrap();
    assert_eq!(root_span["name"], "invoke_workflow title_cta", "{stderr}");
    assert_eq!(spans.iter().filter(|s| s["parent_id"].is_null()).count(), 1, "{:#?}", names(&spans));
    let agents: Vec<&Value> =
        spans.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("invoke_agent "))).collect();
    assert_eq!(agents.len(), model_runs, "a span per attempt: {:#?}", names(&spans));
    assert!(agents.iter().all(|a| a["parent_id"] == root.as_str()));
    // Each model run's chat span under its run's span, with the ledger's usage of that run.
    let ledger = ledger(&t, &task);
    let mut compared = 0;
    for e in ledger["entries"].as_array().unwrap().iter().filter(|e| e["outcome"] == "ok" || e["outcome"] == "failed") {
        let instance = e["instance"].as_str().unwrap();
        let agent = agents.iter().find(|a| attr(a, "gen_ai.agent.id") == instance).unwrap();
        let chat = spans
            .iter()
            .find(|s| s["parent_id"] == agent["context"]["span_id"])
            .unwrap_or_else(|| panic!("no chat span under {agent:#}"));
        assert_eq!(chat["name"], "chat gemma-3-270m");
        assert_eq!(attr(chat, "gen_ai.provider.name"), "local");
        if e["usage"].is_object() {
            assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), e["usage"]["prompt_tokens"], "{e:#}\n{chat:#}");
            assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), e["usage"]["completion_tokens"], "{e:#}\n{chat:#}");
            assert_eq!(attr(agent, "clawboard.slice.tokens"), e["tokens"]);
            assert_eq!(attr(agent, "clawboard.slice.model_tokens"), e["model_tokens"]);
            compared += 1;
        }
    }
    assert!(compared >= 3, "two title candidates and the cta answered: {ledger:#}");
    assert!(
        clawboard_tests::phoenix::board_writes_match_history(&t.root, &task, &spans) >= 1,
        "the winning title wrote"
    );
}
