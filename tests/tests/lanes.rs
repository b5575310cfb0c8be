//! Lanes (seed 004): entries addressed to a role are handled by a real daemon
//! with real role processes. The Doc Update lap (Human -> Aya -> Sho -> Tsugu ->
//! Gen -> Human) with the example roles; a review that refuses; output beyond a
//! role's rights; a role writing entries through the API with its token; and
//! exactly once across `kill -9`.

use std::path::Path;

use clawboard_tests::{Tree, entry_attempts, repo, wait_until};

/// The Doc Update lane of config/examples/doc-update.toml, its roles run from the repository.
fn doc_update_config() -> String {
    let text = std::fs::read_to_string(repo().join("config/examples/doc-update.toml")).unwrap();
    text.replace("\"scripts/roles/", &format!("\"{}/scripts/roles/", repo().display()))
}

fn entries(t: &Tree) -> Vec<serde_json::Value> {
    let r = t.run(&["--json", "entry", "list"]);
    r.ok();
    r.json().as_array().unwrap().clone()
}

fn write_doc(t: &Tree) {
    let dir = t.root.join("projects/vpm-mini/STATE");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("current_state.md"),
        "# current state\n\n## 差分（δ）\n- Phase 1 done\n\n## Next\n- more\n",
    )
    .unwrap();
}

fn ask_aya(t: &Tree, summary: &str) -> String {
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
        summary,
        "--target-doc",
        "STATE/current_state.md#差分（δ）",
    ]);
    r.ok();
    r.json()["id"].as_str().unwrap().to_owned()
}

fn by_kind<'a>(list: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    list.iter().filter(|e| e["kind"] == kind).collect()
}

/// A reload (SIGHUP) swaps the engine's whole config: a daemon started with
/// no lanes takes the Doc Update lane from a reloaded config, and the next
/// entry to Aya runs the lap; the `acl.toml` written beside the config is the
/// policy from then on. A reload that changes what the daemon set up at its
/// start is refused, naming the keys, and the lane keeps working.
#[test]
fn a_reload_brings_lanes_and_the_acl_and_refuses_what_takes_a_restart() {
    let t = Tree::init();
    t.config("");
    write_doc(&t);
    let d = t.daemon();
    let unpicked = ask_aya(&t, "before the lane");
    std::fs::write(t.dir.path().join("acl.toml"), clawboard_core::acl::DEFAULT_ACL).unwrap();
    t.config(&doc_update_config());
    d.signal("HUP");
    wait_until(10, "the reload", || d.output().contains("SIGHUP: config reloaded"));
    let acl = t.dir.path().join("acl.toml");
    assert!(d.output().contains(&format!("acl={}", acl.display())), "{}", d.output());
    ask_aya(&t, "after the lane");
    wait_until(30, "Gen's report to Human", || entries(&t).iter().any(|e| e["kind"] == "doc_update_report"));
    let first = entries(&t).into_iter().find(|e| e["id"] == unpicked.as_str()).unwrap();
    assert_eq!(first["status"], "open", "the entry written before the lane existed was left: {first}");

    t.config(&format!(
        "{}\n[daemon]\nshutdown_grace = \"3s\"\n[limits]\nmax_file_size = \"1 MiB\"\n",
        doc_update_config()
    ));
    d.signal("HUP");
    wait_until(10, "the refused reload", || d.output().contains("config not reloaded"));
    assert!(
        d.output().contains("it changes limits.max_file_size, daemon, which the daemon set up at its start"),
        "{}",
        d.output()
    );
    let reports = || entries(&t).iter().filter(|e| e["kind"] == "doc_update_report").count();
    ask_aya(&t, "after the refused reload");
    wait_until(30, "the second report", || reports() == 2);
    assert_eq!(d.stop(), 0);
}

#[test]
fn the_doc_update_lap_runs_through_a_real_daemon() {
    let t = Tree::init();
    t.config(&doc_update_config());
    write_doc(&t);
    let d = t.daemon();
    let request = ask_aya(&t, "Phase 2 done");
    assert_eq!(request, "vpm-mini-issue571-1");
    wait_until(30, "Gen's report to Human", || entries(&t).iter().any(|e| e["kind"] == "doc_update_report"));
    wait_until(10, "Gen's entry done", || entries(&t).iter().filter(|e| e["status"] == "done").count() == 4);
    assert_eq!(d.stop(), 0);

    let list = entries(&t);
    assert_eq!(list.len(), 5, "{list:#?}");
    let hops: Vec<(&str, &str, &str, &str)> = list
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap(),
                e["kind"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        hops,
        [
            ("Human", "Aya", "doc_update_proposal_request", "done"),
            ("Aya", "Sho", "doc_update_review_request", "done"),
            ("Sho", "Tsugu", "doc_update_apply_request", "done"),
            ("Tsugu", "Gen", "doc_update_report_request", "done"),
            ("Gen", "Human", "doc_update_report", "open"),
        ]
    );
    for e in &list {
        assert_eq!(e["source_issue"], 571, "every hop keeps the issue: {e}");
        assert!(e["id"].as_str().unwrap().starts_with("vpm-mini-"), "{e}");
    }
    assert_eq!(list[0]["note"], "proposed 1 change(s) to Sho");
    assert_eq!(list[4]["payload"]["summary"], "Doc Update done: Phase 2 done");
    let doc = std::fs::read_to_string(t.root.join("projects/vpm-mini/STATE/current_state.md")).unwrap();
    assert_eq!(doc, "# current state\n\n## 差分（δ）\n- Phase 1 done\n- Phase 2 done\n\n## Next\n- more\n");
    // Each entry handled once: one record each, applied, one role run.
    for e in &list[..4] {
        let rec: serde_json::Value = serde_json::from_slice(
            &std::fs::read(t.root.join(format!(".clawboard/lanes/{}.json", e["id"].as_str().unwrap()))).unwrap(),
        )
        .unwrap();
        assert_eq!(rec["state"], "applied");
        assert_eq!(rec["runs"].as_array().unwrap().len(), 1, "{rec}");
    }
    // Human closes the report; the comment form of the request is the seed's.
    t.run(&["entry", "status", list[4]["id"].as_str().unwrap(), "done"]).ok();
    let comment = t.run(&["entry", "render", &request]);
    comment.ok();
    assert!(comment.stdout.starts_with("<!-- blackboard:doc_update_v1 -->\n\njson\n{"), "{}", comment.stdout);
}

#[test]
fn a_refused_review_reaches_human_and_nothing_is_applied() {
    let t = Tree::init();
    t.config(&doc_update_config());
    write_doc(&t);
    let before = std::fs::read(t.root.join("projects/vpm-mini/STATE/current_state.md")).unwrap();
    let d = t.daemon();
    ask_aya(&t, "please reject this one");
    wait_until(30, "Sho's refusal to Human", || entries(&t).iter().any(|e| e["kind"] == "doc_update_error"));
    wait_until(10, "the review done", || by_kind(&entries(&t), "doc_update_review_request")[0]["status"] == "done");
    assert_eq!(d.stop(), 0);
    let list = entries(&t);
    let error = by_kind(&list, "doc_update_error");
    assert_eq!((error[0]["from"].as_str(), error[0]["to"].as_str()), (Some("Sho"), Some("Human")));
    assert!(by_kind(&list, "doc_update_apply_request").is_empty());
    assert_eq!(std::fs::read(t.root.join("projects/vpm-mini/STATE/current_state.md")).unwrap(), before);
}

/// A lane whose one actor, `Bot`, is `sh -c SCRIPT`; it may write `ok_kind` entries.
fn bot_config(script: &str, extra: &str) -> String {
    let script = script.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    format!(
        r#"[roles.bot]
command = ["sh", "-c", "{script}"]
timeout = "20s"
max_retries = 0
{extra}
[lanes.l]
docs = "projects/{{project_id}}"
[lanes.l.actors.Bot]
role = "bot"
allowed_kinds = ["ok_kind"]
"#
    )
}

fn ask(t: &Tree, to: &str, kind: &str) -> String {
    ask_with(t, to, kind, &["--target-doc", "a.md"])
}

/// `entry new` in project p from Human, with `extra` arguments; the new entry's id.
fn ask_with(t: &Tree, to: &str, kind: &str, extra: &[&str]) -> String {
    let mut args = vec!["--json", "entry", "new", "--project", "p", "--from", "Human", "--to", to, "--kind", kind];
    args.extend_from_slice(extra);
    let r = t.run(&args);
    r.ok();
    r.json()["id"].as_str().unwrap().to_owned()
}

fn entry(t: &Tree, id: &str) -> serde_json::Value {
    let r = t.run(&["--json", "entry", "show", id]);
    r.ok();
    r.json()
}

#[test]
fn output_beyond_the_roles_rights_ends_the_entry_in_error_and_writes_nothing() {
    let cases = [
        (r#"{"entries":[{"to":"Human","kind":"secret_kind"}]}"#, "entries[0].kind: Bot may not write \"secret_kind\""),
        (r#"{"docs":[{"path":"a.md","content":"x"}]}"#, "docs[0]: Bot may not change documents"),
        (r#"{"from":"Human","entries":[]}"#, "unknown field `from`"),
        (r#"{"status":"open"}"#, "status: open"),
        ("not json", "invalid output"),
    ];
    for (out, why) in cases {
        let t = Tree::init();
        t.config(&bot_config(&format!("cat >/dev/null; printf '%s' '{out}'"), ""));
        let d = t.daemon();
        let id = ask(&t, "Bot", "anything");
        wait_until(20, "the entry to end", || entry(&t, &id)["status"] == "error");
        assert_eq!(d.stop(), 0);
        let e = entry(&t, &id);
        assert!(e["note"].as_str().unwrap().contains(why), "{out}: {e}");
        assert_eq!(entries(&t).len(), 1, "{out}: no entry written");
        assert!(!t.root.join("projects/p/a.md").exists());
    }
}

/// Python that posts `body` to the daemon's API as this role and prints the status.
fn post(path: &str, body: &str) -> String {
    format!(
        r#"python3 -c 'import http.client,json,os,socket,sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock=socket.socket(socket.AF_UNIX); self.sock.connect(os.environ["CLAWBOARD_ROOT"]+"/.clawboard/api.sock")
c=C("x"); c.request("POST","{path}",body=sys.argv[1],headers={{"Authorization":"Bearer "+os.environ.get("TOKEN_OVERRIDE",os.environ["CLAWBOARD_TOKEN"])}})
r=c.getresponse(); print(r.status, r.read().decode().replace(chr(10)," "), file=sys.stderr); print(r.status)' '{body}'"#
    )
}

#[test]
fn a_role_writes_entries_through_the_api_with_its_token() {
    let t = Tree::init();
    let script = format!(
        "cat >/dev/null; a=$({}); b=$({}); c=$({}); d=$(TOKEN_OVERRIDE=forged {}); printf '{{\"note\":\"%s %s %s %s\"}}' $a $b $c $d",
        post("/v1/entries", r#"{"to":"Human","kind":"ok_kind","payload":{"summary":"via the API"}}"#),
        post("/v1/entries", r#"{"to":"Human","kind":"secret_kind"}"#),
        post("/v1/write?path=entries/p/forged.json", r#"{}"#),
        post("/v1/entries", r#"{"to":"Human","kind":"ok_kind"}"#),
    );
    t.config(&bot_config(&script, ""));
    let d = t.daemon();
    let id = ask(&t, "Bot", "anything");
    wait_until(20, "the entry handled", || entry(&t, &id)["status"] == "done");
    let log = d.output();
    assert_eq!(d.stop(), 0);
    assert_eq!(entry(&t, &id)["note"], "201 403 403 401", "{log}");
    let list = entries(&t);
    assert_eq!(list.len(), 2, "{list:#?}");
    let made = &list[1];
    assert_eq!((made["from"].as_str(), made["to"].as_str()), (Some("Bot"), Some("Human")), "from is forced");
    assert_eq!(made["payload"]["summary"], "via the API");
    assert_eq!(made["target_docs"][0], "a.md", "the handled entry's docs by default");
    assert!(!t.root.join("entries/p/forged.json").exists());
}

/// A lane's role runs like a task's step: retried with the reason as feedback,
/// then its fallback; every run has an attempt record with its output beside it,
/// and the handling record has one line per run.
#[test]
fn a_lane_role_is_retried_with_feedback_then_falls_back_and_every_run_is_recorded() {
    let t = Tree::init();
    let seen = t.root.join("seen");
    std::fs::create_dir_all(&seen).unwrap();
    let config = format!(
        r#"[roles.bot]
command = ["sh", "-c", "cat > {seen}/bot-$$.json; printf 'not json'"]
timeout = "20s"
max_retries = 1
retry_backoff = "10ms"
fallback = "spare"

[roles.spare]
command = ["sh", "-c", "cat > {seen}/spare.json; printf '{{\"note\":\"from the spare\"}}'"]
timeout = "20s"
max_retries = 0

[lanes.l]
docs = "projects/{{project_id}}"
[lanes.l.actors.Bot]
role = "bot"
allowed_kinds = ["ok_kind"]
"#,
        seen = seen.display()
    );
    t.config(&config);
    let d = t.daemon();
    let id = ask(&t, "Bot", "anything");
    wait_until(20, "the entry handled", || entry(&t, &id)["status"] == "done");
    assert_eq!(d.stop(), 0);
    assert_eq!(entry(&t, &id)["note"], "from the spare");

    let records: Vec<serde_json::Value> = entry_attempts(&t.root, &id).into_iter().map(|(_, a)| a).collect();
    let outline: Vec<(u64, &str, &str, &str)> = records
        .iter()
        .map(|a| {
            (
                a["number"].as_u64().unwrap(),
                a["role"].as_str().unwrap(),
                a["status"].as_str().unwrap(),
                a["step"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(outline, [(1, "bot", "failed", "l/Bot"), (2, "bot", "failed", "l/Bot"), (3, "spare", "ok", "l/Bot")]);
    assert!(records[0]["error"].as_str().unwrap().starts_with("invalid output"), "{}", records[0]);
    let dir = t.root.join(format!(".clawboard/lanes/{id}/attempts"));
    assert_eq!(std::fs::read_to_string(dir.join("0003-spare.stdout")).unwrap(), r#"{"note":"from the spare"}"#);
    assert_eq!(std::fs::read_to_string(dir.join("0001-bot.stdout")).unwrap(), "not json");

    // The second run of bot and the spare were told why the runs before them were refused.
    let mut contexts: Vec<serde_json::Value> = std::fs::read_dir(&seen)
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    contexts.sort_by_key(|c| c["attempt"].as_u64());
    let feedback: Vec<usize> = contexts.iter().map(|c| c["feedback"].as_array().map_or(0, Vec::len)).collect();
    assert_eq!(feedback, [0, 1, 2]);
    assert!(contexts[1]["feedback"][0].as_str().unwrap().starts_with("bot: invalid output"), "{}", contexts[1]);
    assert_eq!(contexts[2]["entry"]["id"], id.as_str());

    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join(format!(".clawboard/lanes/{id}.json"))).unwrap()).unwrap();
    let runs = rec["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{rec}");
    assert!(runs[2].as_str().unwrap().ends_with("(0003-spare): ok"), "{rec}");
}

/// A lane's role is handed only the docs its access rules let it read: a refused
/// one is named with the rule, its content withheld.
#[test]
fn a_lane_role_is_handed_only_the_docs_its_access_rules_allow() {
    let t = Tree::init();
    let seen = t.root.join("seen.json");
    let config = bot_config(&format!("cat > {}; printf '{{}}'", seen.display()), "");
    // The seed's policy, except that no worker reads projects/p/private/.
    let acl = format!(
        "{}\n[dirs.\"projects/p/private/\"]\nassistant = \"R\"\ngm = \"R\"\nvalidator = \"R\"\nplatform-pm = \"R\"\npm = \"R\"\nworker = \"-\"\n",
        clawboard_core::acl::DEFAULT_ACL
    );
    std::fs::write(t.dir.path().join("acl.toml"), acl).unwrap();
    t.config(&config);
    std::fs::create_dir_all(t.root.join("projects/p/private")).unwrap();
    std::fs::write(t.root.join("projects/p/a.md"), "open text").unwrap();
    std::fs::write(t.root.join("projects/p/private/secret.md"), "SECRET").unwrap();
    let d = t.daemon();
    let id = ask_with(&t, "Bot", "anything", &["--target-doc", "a.md", "--target-doc", "private/secret.md"]);
    wait_until(20, "the entry handled", || entry(&t, &id)["status"] == "done");
    assert_eq!(d.stop(), 0);
    let ctx: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    let docs = ctx["targetDocs"].as_array().unwrap();
    assert_eq!(docs[0]["content"], "open text", "{ctx}");
    assert_eq!(docs[1]["content"], serde_json::Value::Null, "{ctx}");
    assert!(docs[1]["refused"].as_str().unwrap().contains("projects/p/private/"), "{ctx}");
    assert!(!std::fs::read_to_string(&seen).unwrap().contains("SECRET"));
}

/// Ids of the entries in `list` that answer `request` (their payload's refs.request).
fn answers<'a>(list: &'a [serde_json::Value], request: &str) -> Vec<&'a serde_json::Value> {
    list.iter().filter(|e| e["payload"]["refs"]["request"] == request).collect()
}

/// This node's handling records (`.clawboard/lanes/{id}.json`; the runs' attempt
/// records are in `.clawboard/lanes/{id}/attempts/`).
fn records(root: &Path) -> usize {
    std::fs::read_dir(root.join(".clawboard/lanes"))
        .map(|d| d.filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))).count())
        .unwrap_or(0)
}

#[test]
fn every_entry_is_handled_exactly_once_across_kill_9() {
    let t = Tree::init();
    // Bot answers each request with one entry naming it, after a while.
    let script = r#"ctx=$(cat); id=$(printf '%s' "$ctx" | python3 -c 'import json,sys; print(json.load(sys.stdin)["entry"]["id"])'); sleep 0.3; printf '{"entries":[{"to":"Human","kind":"ok_kind","payload":{"refs":{"request":"%s"}}}]}' "$id""#;
    t.config(&bot_config(script, "").replace("[roles.bot]", "[lifecycle]\nmax_parallel_roles = 4\n\n[roles.bot]"));
    let n = 24;
    let requests: Vec<String> = (0..n).map(|_| ask(&t, "Bot", "req")).collect();
    let mut kills = 0;
    for round in 0..6 {
        let d = t.daemon();
        std::thread::sleep(std::time::Duration::from_millis(400 + 150 * round));
        let done = requests.iter().filter(|r| entry(&t, r)["status"] == "done").count();
        if done == n {
            d.stop();
            break;
        }
        d.crash();
        kills += 1;
    }
    let d = t.daemon();
    wait_until(60, "every request done", || requests.iter().all(|r| entry(&t, r)["status"] == "done"));
    assert_eq!(d.stop(), 0);
    assert!(kills >= 2, "the daemon was killed while it worked ({kills} times)");
    let list = entries(&t);
    for r in &requests {
        assert_eq!(answers(&list, r).len(), 1, "request {r} answered once: {list:#?}");
    }
    assert_eq!(list.len(), 2 * n);
    assert_eq!(records(&t.root), n);
}

/// Two nodes on one bucket, both running the lane: every request, written on
/// either node, is handled by exactly one of them (the cross-node claim), and the
/// other records it as lost.
#[rstest::rstest]
#[case::dir(clawboard_tests::s3::Kind::Dir)]
#[case::s3s(clawboard_tests::s3::Kind::S3s)]
fn two_nodes_handle_every_entry_once(#[case] kind: clawboard_tests::s3::Kind) {
    let scratch = tempfile::tempdir().unwrap();
    let bucket = clawboard_tests::s3::Bucket::new(kind, scratch.path());
    let runlog = scratch.path().join("runs.log");
    std::fs::write(&runlog, "").unwrap();
    let script = format!(
        r#"ctx=$(cat); id=$(printf '%s' "$ctx" | python3 -c 'import json,sys; print(json.load(sys.stdin)["entry"]["id"])'); echo "$id $CLAWBOARD_ROOT" >> {}; printf '{{"entries":[{{"to":"Human","kind":"ok_kind","payload":{{"refs":{{"request":"%s"}}}}}}]}}' "$id""#,
        runlog.display()
    );
    let nodes: Vec<Tree> = ["node-a", "node-b"]
        .iter()
        .map(|id| {
            let t = Tree::init();
            let sync = bucket.sync_config(
                t.dir.path(),
                "schedule = \"* * * * * *\"\nheartbeat = \"1s\"\nlease = \"4s\"\nretry_base = \"50ms\"\nretries = 2",
            );
            t.config(&format!("[node]\nid = \"{id}\"\n\n{}\n{sync}", bot_config(&script, "")));
            t
        })
        .collect();
    let daemons: Vec<_> = nodes.iter().map(Tree::daemon).collect();
    let mut requests = Vec::new();
    for i in 0..6 {
        let t = &nodes[i % 2];
        requests.push(ask_with(t, "Bot", "req", &["--source", &format!("n{}", i % 2)]));
    }
    let settled = |t: &Tree| {
        let list = entries(t);
        requests.iter().all(|r| list.iter().any(|e| e["id"] == r.as_str() && e["status"] == "done"))
            && requests.iter().all(|r| answers(&list, r).len() == 1)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !nodes.iter().all(settled) {
        if std::time::Instant::now() > deadline {
            let lists: Vec<String> = nodes
                .iter()
                .map(|t| {
                    let ids: Vec<String> = entries(t)
                        .iter()
                        .map(|e| format!("{} {} {}", e["id"], e["status"], e["payload"]["refs"]["request"]))
                        .collect();
                    ids.join("\n")
                })
                .collect();
            let logs: Vec<String> = daemons.iter().map(|d| d.output()).collect();
            // What sync knew of each request (seen once in a full run: one node kept
            // the other's entry at `in_progress`): its last pull and push reports, and
            // the version records of the requests' files.
            let sync_state: Vec<String> = nodes
                .iter()
                .map(|t| {
                    let status =
                        std::fs::read_to_string(t.root.join(".clawboard/sync/status.json")).unwrap_or_default();
                    let sync_dir = t.root.join(".clawboard/sync");
                    let ours = |path: &str| requests.iter().any(|r| path.contains(r.as_str()));
                    let snapshot: serde_json::Value = std::fs::read(sync_dir.join("pushed.json"))
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or_default();
                    let mut records: Vec<String> = snapshot["files"]
                        .as_object()
                        .map(|files| {
                            files.iter().filter(|(p, _)| ours(p)).map(|(p, r)| format!("snapshot {p}: {r}")).collect()
                        })
                        .unwrap_or_default();
                    let log = std::fs::read_to_string(sync_dir.join("pushed.log")).unwrap_or_default();
                    records.extend(log.lines().filter(|l| ours(l)).map(|l| format!("log {l}")));
                    format!("status.json: {status}\nrecords:\n{}", records.join("\n"))
                })
                .collect();
            panic!(
                "not settled after 90 s\nnode-a:\n{}\nnode-b:\n{}\nsync, node-a:\n{}\nsync, node-b:\n{}\nlogs:\n{}",
                lists[0],
                lists[1],
                sync_state[0],
                sync_state[1],
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    for d in daemons {
        assert_eq!(d.stop(), 0);
    }
    let runs = std::fs::read_to_string(&runlog).unwrap();
    for r in &requests {
        let n = runs.lines().filter(|l| l.split(' ').next() == Some(r.as_str())).count();
        assert_eq!(n, 1, "{r} ran once over both nodes:\n{runs}");
        let states: Vec<String> = nodes
            .iter()
            .filter_map(|t| std::fs::read(t.root.join(format!(".clawboard/lanes/{r}.json"))).ok())
            .map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap()["state"].as_str().unwrap().to_owned())
            .collect();
        assert!(states.iter().filter(|s| *s == "applied").count() == 1, "{r}: {states:?}");
        assert!(states.iter().all(|s| s == "applied" || s == "lost"), "{r}: {states:?}");
    }
}

#[test]
fn hostile_entry_files_are_skipped_and_change_nothing() {
    let t = Tree::init();
    t.config(&bot_config("cat >/dev/null; echo '{}'", ""));
    let d = t.daemon();
    let dir = t.root.join("entries/p");
    std::fs::create_dir_all(&dir).unwrap();
    let seed = std::fs::read_to_string(
        repo().join("tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"),
    )
    .unwrap()
    .replace("\"vpm-mini\"", "\"p\"")
    .replace("vpm-mini-docupdate-issue571-1", "PLACEHOLDER")
    .replace("\"Aya\"", "\"Bot\"");
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("wrong-types", seed.replace("PLACEHOLDER", "wrong-types").replace("\"open\"", "42").into_bytes()),
        ("huge", {
            let pad = "x".repeat(10 * 1024 * 1024);
            seed.replace("PLACEHOLDER", "huge").replace("\"Phase 2 完了\"", &format!("\"{pad}\"")).into_bytes()
        }),
        ("other-id", seed.replace("PLACEHOLDER", "not-this-file").into_bytes()),
        ("not-json", b"{\"id\": ".to_vec()),
    ];
    for (name, bytes) in &hostile {
        std::fs::write(dir.join(format!("{name}.json")), bytes).unwrap();
    }
    let good = ask(&t, "Bot", "anything");
    wait_until(20, "the good entry handled", || entry(&t, &good)["status"] == "done");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let log = d.output();
    assert_eq!(d.stop(), 0, "{log}");
    for (name, bytes) in &hostile {
        assert_eq!(&std::fs::read(dir.join(format!("{name}.json"))).unwrap(), bytes, "{name} untouched");
        assert!(!t.root.join(format!(".clawboard/lanes/{name}.json")).exists(), "{name} never claimed");
    }
    assert!(log.contains("skipping an entry that does not read"), "{log}");
}
