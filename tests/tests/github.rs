//! The GitHub bridge end to end: the real binary against the GitHub REST
//! simulator (scripts/github-sim: GitHub's OpenAPI description with stateful
//! issues and comments, rate limits and delays on demand). Each test seeds its own
//! repository through the simulator's `/_sim/` controls and reads its request log.
//! Import, export, an edit after a status change, 304s when nothing changed,
//! exactly one comment across `kill -9` mid-POST, a refused token, a broken
//! comment, rate limits, a token file, and the daemon's job.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clawboard_tests::{Run, Tree, wait_until};
use serde_json::{Value, json};

pub(crate) mod sim;
use sim::{Repo, http, token};

/// A tree whose `[github]` bridges `repo`'s issue 1.
fn tree(repo: &Repo, extra: &str) -> Tree {
    let t = Tree::init();
    t.config(&repo.config(extra));
    t
}

/// `clawboard --config … ARGS` with `token` in GITHUB_TOKEN; the valid token never
/// shows in what it prints.
fn cb(t: &Tree, token: &str, args: &[&str]) -> Run {
    let r = Run::from(command(t, token, args).stdin(Stdio::null()).output().unwrap());
    let real = self::token();
    assert!(!r.stdout.contains(&real) && !r.stderr.contains(&real), "the token was printed:\n{r:?}");
    r
}

fn command(t: &Tree, token: &str, args: &[&str]) -> Command {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut c = t.command(&all);
    c.env("GITHUB_TOKEN", token);
    c
}

fn sync(t: &Tree) -> Value {
    let r = cb(t, &token(), &["--json", "entry", "github", "sync"]);
    r.ok();
    r.json()
}

/// An entry in its comment form, as a person (or another node) would post it.
fn entry_comment(id: &str, status: &str, updated: &str) -> String {
    let e = json!({
        "id": id, "from": "Human", "to": "Aya", "project_id": "vpm-mini", "kind": "doc_update_proposal_request",
        "status": status, "payload": {"summary": "reflect phase 2"}, "target_docs": ["STATE/current_state.md"],
        "created_at": "2025-11-30T02:30:00+09:00", "updated_at": updated,
    });
    format!("<!-- blackboard:doc_update_v1 -->\n\njson\n{}\n", serde_json::to_string_pretty(&e).unwrap())
}

fn new_entry(t: &Tree) -> String {
    let r = t.run(&[
        "--json",
        "entry",
        "new",
        "--project",
        "vpm-mini",
        "--issue",
        "1",
        "--from",
        "Human",
        "--to",
        "Aya",
        "--kind",
        "doc_update_proposal_request",
        "--summary",
        "reflect phase 2",
    ]);
    r.ok();
    r.json()["id"].as_str().unwrap().to_owned()
}

fn show(t: &Tree, id: &str) -> Value {
    let r = t.run(&["entry", "show", id]);
    r.ok();
    r.json()
}

fn render(t: &Tree, id: &str) -> String {
    let r = t.run(&["entry", "render", id]);
    r.ok();
    r.stdout.clone()
}

fn ids(list: &Value) -> Vec<&str> {
    list.as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect()
}

#[test]
fn a_comment_with_a_marker_becomes_a_local_entry_and_a_broken_one_is_reported() {
    let broken = "<!-- blackboard:doc_update_v1 -->\n\njson\n{'id': 'vpm-mini-issue1-7'}\n".to_owned();
    let repo = Repo::new(
        "import",
        &[
            "LGTM".into(),
            entry_comment("vpm-mini-issue1-5", "open", "2025-11-30T02:30:00+09:00"),
            broken,
            entry_comment("vpm-mini-issue1-6", "in_progress", "2025-11-30T03:00:00+09:00"),
        ],
    );
    let t = tree(&repo, "");
    let report = sync(&t);
    assert_eq!(ids(&report["imported"]), ["vpm-mini-issue1-5", "vpm-mini-issue1-6"], "{report:#}");
    let comments = repo.comments();
    let e = show(&t, "vpm-mini-issue1-5");
    assert_eq!(e["source_issue"], 1);
    assert_eq!(e["source_comment_id"], comments[1]["id"]);
    assert_eq!(show(&t, "vpm-mini-issue1-6")["status"], "in_progress");
    let skipped = report["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{report:#}");
    assert_eq!(skipped[0]["comment"], comments[2]["id"]);
    assert!(skipped[0]["reason"].as_str().unwrap().contains("rule 3 (one JSON object)"), "{report:#}");
    // The human form names the rule too.
    let r = cb(&t, &token(), &["entry", "github", "sync"]);
    r.ok();
    assert!(r.stdout.contains(&format!("comment {}", comments[2]["id"])) && r.stdout.contains("rule 3"), "{r:?}");
}

/// An entry comment is taken only from someone who can push to the repository
/// (owner, member, collaborator) or is in github.trusted_authors: anyone can
/// comment on a public issue, and an entry asks a role to act.
#[test]
fn an_entry_comment_by_someone_without_write_access_is_not_taken() {
    let repo = Repo::by(
        "untrusted",
        Some("mallory"),
        &[entry_comment("vpm-mini-issue1-5", "open", "2025-11-30T02:30:00+09:00")],
    );
    let t = tree(&repo, "");
    let report = sync(&t);
    assert!(report["imported"].as_array().unwrap().is_empty(), "{report:#}");
    let why = report["skipped"][0]["reason"].as_str().unwrap();
    assert!(why.contains("written by mallory (NONE), who is neither the repository's owner"), "{why}");
    assert!(t.run(&["entry", "show", "vpm-mini-issue1-5"]).code != 0, "no entry was made");

    // The repository's owner is trusted without being listed; so is a listed login.
    let owner_repo =
        Repo::by("owner", None, &[entry_comment("vpm-mini-issue1-6", "open", "2025-11-30T02:30:00+09:00")]);
    let t = Tree::init();
    t.config(&owner_repo.config("").replace(&format!("trusted_authors = [\"{}\"]", sim::login()), ""));
    let report = sync(&t);
    assert_eq!(ids(&report["imported"]), ["vpm-mini-issue1-6"], "{report:#}");

    // A copy from the future would win every later comparison: not taken.
    let later = Repo::new("future", &[entry_comment("vpm-mini-issue1-7", "open", "2999-01-01T00:00:00Z")]);
    let t = tree(&later, "");
    let report = sync(&t);
    assert!(report["imported"].as_array().unwrap().is_empty(), "{report:#}");
    assert!(report["skipped"][0]["reason"].as_str().unwrap().contains("is in the future"), "{report:#}");
}

#[test]
fn a_local_entry_gets_one_comment_and_a_sync_without_change_is_all_304s() {
    let repo = Repo::new("export", &[]);
    let t = tree(&repo, "");
    let id = new_entry(&t);
    let report = sync(&t);
    assert_eq!(ids(&report["posted"]), [id.as_str()], "{report:#}");
    let comments = repo.comments();
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0]["body"].as_str().unwrap(), render(&t, &id), "the comment is `clawboard entry render`");
    assert_eq!(show(&t, &id)["source_comment_id"], comments[0]["id"]);

    let seq = repo.last_seq();
    // With every log line on: the token shows in none of them.
    let r = cb(&t, &token(), &["-vv", "--json", "entry", "github", "sync"]);
    r.ok();
    let quiet = r.json();
    for what in ["imported", "updated", "posted", "edited", "recorded", "skipped"] {
        assert!(quiet[what].as_array().unwrap().is_empty(), "{what}: {quiet:#}");
    }
    let requests = repo.requests(seq);
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(
            (r["method"].as_str(), r["status"].as_u64(), r["if_none_match"].as_bool()),
            (Some("GET"), Some(304), Some(true)),
            "{requests:#?}"
        );
    }
    assert_eq!(quiet["not_modified"], requests.len());
    assert_eq!(repo.comments().len(), 1);
}

#[test]
fn a_status_change_edits_the_comment_on_the_next_sync() {
    let repo = Repo::new("status", &[]);
    let t = tree(&repo, "");
    let id = new_entry(&t);
    sync(&t);
    t.run(&["entry", "status", &id, "done", "--as", "Human"]).ok();
    let report = sync(&t);
    assert_eq!(ids(&report["edited"]), [id.as_str()], "{report:#}");
    assert!(report["posted"].as_array().unwrap().is_empty());
    let comments = repo.comments();
    assert_eq!(comments.len(), 1, "still one comment");
    let body = comments[0]["body"].as_str().unwrap();
    assert_eq!(body, render(&t, &id));
    assert!(body.contains("\"status\": \"done\""), "{body}");
}

#[test]
fn a_sync_killed_while_github_stores_its_comment_makes_no_second_one() {
    let repo = Repo::new("crash", &[]);
    let t = tree(&repo, "");
    let id = new_entry(&t);
    let path = format!("/repos/{}/issues/1/comments", repo.full());
    let (status, _) =
        http("POST", "/_sim/delay", Some(json!({"method": "POST", "path": path, "ms": 20_000, "count": 1})));
    assert_eq!(status, 201);
    let mut child = command(&t, &token(), &["entry", "github", "sync"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(20, "GitHub to store the comment", || repo.comments().len() == 1);
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "the sync waits for GitHub's answer");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(show(&t, &id).get("source_comment_id").is_none(), "killed before it recorded the comment");

    let report = sync(&t);
    assert!(report["posted"].as_array().unwrap().is_empty(), "{report:#}");
    let comments = repo.comments();
    assert_eq!(comments.len(), 1, "exactly one comment: {comments:#?}");
    assert_eq!(ids(&report["recorded"]), [id.as_str()]);
    assert_eq!(show(&t, &id)["source_comment_id"], comments[0]["id"]);
    assert_eq!(comments[0]["body"].as_str().unwrap(), render(&t, &id));
}

#[test]
fn a_wrong_token_is_one_clear_error_and_never_printed() {
    let repo = Repo::new("token", &[]);
    let t = tree(&repo, "");
    new_entry(&t);
    let wrong = "ghp_thisisnotthetoken0123456789abcdef";
    for args in
        [&["entry", "github", "sync"][..], &["--json", "entry", "github", "sync"], &["-vv", "entry", "github", "sync"]]
    {
        let seq = repo.last_seq();
        let r = cb(&t, wrong, args);
        r.expect_code(2);
        assert!(!r.stdout.contains(wrong) && !r.stderr.contains(wrong), "{r:?}");
        let want = "GitHub refused the token (401 Bad credentials): check github.token_env / github.token_file";
        assert_eq!(r.stderr.matches(want).count(), 1, "{r:?}");
        let requests = repo.requests(seq);
        assert_eq!(requests.len(), 1, "one request, not retried: {requests:#?}");
        assert_eq!(requests[0]["authorization"], "invalid");
    }
    assert!(repo.comments().is_empty());
    let r = Run::from(
        t.command(&["--config", t.dir.path().join("clawboard.toml").to_str().unwrap(), "entry", "github", "sync"])
            .output()
            .unwrap(),
    );
    r.expect_code(2);
    assert!(r.stderr.contains("the environment variable GITHUB_TOKEN (github.token_env) is not set"), "{r:?}");
}

#[test]
fn rate_limits_are_waited_out_up_to_max_wait() {
    let repo = Repo::new("ratelimit", &[entry_comment("vpm-mini-issue1-1", "open", "2025-11-30T02:30:00+09:00")]);
    let t = tree(&repo, "max_wait = \"5s\"\n");
    let limit = |retry_after: u64| {
        let rule = json!({"kind": "secondary", "retry_after": retry_after, "count": 1, "owner": repo.owner, "repo": repo.name});
        assert_eq!(http("POST", "/_sim/rate-limit", Some(rule)).0, 201);
    };
    limit(60);
    let r = cb(&t, &token(), &["entry", "github", "sync"]);
    r.expect_code(1);
    assert!(r.stderr.contains("rate limited") && r.stderr.contains("github.max_wait (5s"), "{r:?}");

    let seq = repo.last_seq();
    limit(2);
    let started = Instant::now();
    let report = sync(&t);
    assert!(started.elapsed() >= Duration::from_millis(1500), "waited out Retry-After: {:?}", started.elapsed());
    assert_eq!(ids(&report["imported"]), ["vpm-mini-issue1-1"]);
    assert_eq!(report["rate_limited"], 1);
    let requests = repo.requests(seq);
    assert_eq!(requests[0]["rate_limited"], "secondary");
    assert_eq!(requests[1]["status"], 200, "{requests:#?}");
}

#[test]
fn a_token_file_must_be_private() {
    let repo = Repo::new("tokenfile", &[entry_comment("vpm-mini-issue1-1", "open", "2025-11-30T02:30:00+09:00")]);
    let t = Tree::init();
    let file = t.scratch("token", format!("{}\n", token()).as_bytes());
    t.config(&repo.config(&format!("token_file = \"{}\"\n", file.display())));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = cb(&t, "", &["entry", "github", "sync"]);
    r.expect_code(2);
    assert!(r.stderr.contains("(github.token_file): group or others have access to it (mode 644)"), "{r:?}");
    assert!(r.stderr.contains("run `chmod 600"), "{r:?}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = cb(&t, "", &["--json", "entry", "github", "sync"]);
    r.ok();
    assert_eq!(ids(&r.json()["imported"]), ["vpm-mini-issue1-1"]);
}

#[test]
fn the_daemon_bridges_on_its_schedule() {
    let repo = Repo::new("daemon", &[entry_comment("vpm-mini-issue1-1", "open", "2025-11-30T02:30:00+09:00")]);
    let t = Tree::init();
    let file = t.scratch("token", token().as_bytes());
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!("enabled = true\nschedule = \"* * * * * *\"\ntoken_file = \"{}\"\n", file.display());
    t.config(&format!("[daemon]\nshutdown_grace = \"2s\"\n\n{}", repo.config(&extra)));
    let d = t.daemon();
    let imported = t.root.join("entries/vpm-mini/vpm-mini-issue1-1.json");
    wait_until(20, "the daemon to import the comment", || imported.exists());
    let id = new_entry(&t);
    wait_until(20, "the daemon to post the new entry", || {
        let comments = repo.comments();
        comments.len() == 2 && comments[1]["body"].as_str() == Some(render(&t, &id).as_str())
    });
    assert_eq!(d.stop(), 0);
    assert_eq!(repo.comments().len(), 2);
}

#[test]
fn every_page_of_a_labeled_issue_is_read_and_asked_for_conditionally() {
    let mut comments: Vec<String> = (0..130).map(|i| format!("comment {i}")).collect();
    comments.push(entry_comment("vpm-mini-issue1-1", "open", "2025-11-30T02:30:00+09:00"));
    let repo = Repo::labeled("pages", &["blackboard"], &comments);
    let t = Tree::init();
    let config = repo.config("").replace("issues = [{ numbers = [1] }]", "issues = [{ label = \"blackboard\" }]");
    t.config(&config);
    let report = sync(&t);
    assert_eq!(report["issues"], json!([1]));
    assert_eq!(ids(&report["imported"]), ["vpm-mini-issue1-1"], "an entry on page 2: {report:#}");

    // A new comment lands on page 2 only: page 1 answers 304, page 2 is read again.
    repo.comment(1, &entry_comment("vpm-mini-issue1-2", "open", "2025-11-30T02:30:00+09:00"));
    let seq = repo.last_seq();
    let report = sync(&t);
    assert_eq!(ids(&report["imported"]), ["vpm-mini-issue1-2"], "{report:#}");
    let gets: Vec<(String, u64)> = repo
        .requests(seq)
        .iter()
        .filter(|r| r["method"] == "GET" && r["path"].as_str().unwrap().contains("/comments"))
        .map(|r| (r["path"].as_str().unwrap().to_owned(), r["status"].as_u64().unwrap()))
        .collect();
    // The two pages, then (after the imported entry's comment was edited to name
    // where it lives) the two again, to keep the cache current.
    assert_eq!(gets.len(), 4, "{gets:#?}");
    assert!(!gets[0].0.contains("page=2") && gets[0].1 == 304, "{gets:#?}");
    assert!(gets[1].0.contains("page=2") && gets[1].1 == 200, "{gets:#?}");
}
