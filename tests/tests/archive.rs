//! The memory archive end to end: the real binary commits the tree's memory to the
//! `memory` branch and pushes it to a real git server speaking smart HTTP
//! (lighttpd running `git http-backend`, basic auth); the plain git CLI then
//! clones it and reads what landed.

use std::path::Path;

use clawboard_tests::archive::{archive_config, cb, clone, memory, now, status, subjects, tree};
use clawboard_tests::git::{GitServer, SshServer, git};
use clawboard_tests::{Tree, wait_until};

#[test]
fn tasks_completed_by_the_daemon_are_archived_and_cloned_with_git() {
    let server = GitServer::shared();
    let remote = server.unique_repo("daemon");
    let t = Tree::init();
    t.config(&format!("{}\n{}", clawboard_tests::sh_config(""), archive_config("node-a", &server, &remote, "")));
    let d = t.daemon();
    for id in ["task-1", "task-2"] {
        t.drop_task(
            &format!("{id}.json"),
            &format!(
                r#"{{"taskId":"{id}","type":"coding","description":"d","priority":"normal","createdBy":"human"}}"#
            ),
        );
    }
    wait_until(60, "both tasks completed", || {
        t.status_of("task-1") == "completed" && t.status_of("task-2") == "completed"
    });
    let first = cb(&t, &server.token, &["archive", "now", "--json"]);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    let report = first.json();
    assert!(report["archive"]["commit"]["commit"].is_string(), "{report}");
    assert_eq!(report["harvest"]["queueCompleted"], 2, "{report}");

    let scratch = tempfile::tempdir().unwrap();
    let c = clone(&server, &remote, scratch.path());
    for id in ["task-1", "task-2"] {
        let cell: serde_json::Value =
            serde_json::from_slice(&std::fs::read(c.join(format!("memory/roles/w/{id}.json"))).unwrap()).unwrap();
        assert_eq!(cell["taskId"], id);
        assert_eq!(cell["taskType"], "coding");
        assert_eq!(cell["cells"][0]["content"], "c");
    }
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let daily: serde_json::Value =
        serde_json::from_slice(&std::fs::read(c.join(format!("memory/harvest/daily/{today}.json"))).unwrap()).unwrap();
    assert_eq!(daily["tasks"], serde_json::json!(["task-1", "task-2"]));
    assert_eq!(daily["cells"].as_array().unwrap().len(), 1, "the same cell from two tasks counts once: {daily}");
    assert!(c.join("memory/README.md").exists());
    let log = subjects(&c);
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].starts_with("memory: sync from node-a at 20"), "{log:?}");
    assert_eq!(git(&c, &["log", "-1", "--format=%an <%ae>"]).trim(), "Memory Bot <bot@example.invalid>");

    // Nothing changed: no new commit, nothing pushed.
    let again = cb(&t, &server.token, &["archive", "now", "--json"]).ok().json();
    assert!(again["archive"]["commit"]["commit"].is_null(), "{again}");
    assert_eq!(status(&t)["commits"], 1);

    // A third task: one more commit, on top of the first.
    t.drop_task(
        "task-3.json",
        r#"{"taskId":"task-3","type":"coding","description":"d","priority":"normal","createdBy":"human"}"#,
    );
    wait_until(60, "task-3 completed", || t.status_of("task-3") == "completed");
    cb(&t, &server.token, &["archive", "now"]).ok();
    git(&c, &["pull", "--quiet", "--ff-only"]);
    assert_eq!(subjects(&c).len(), 2);
    assert!(c.join("memory/roles/w/task-3.json").exists());
    let st = status(&t);
    assert_eq!((st["commits"].as_u64(), st["pending"].as_u64()), (Some(2), Some(0)), "{st}");
    let log = cb(&t, "", &["archive", "log"]).ok().stdout.clone();
    assert_eq!(log.lines().filter(|l| l.contains("memory: sync from node-a")).count(), 2, "{log}");
    assert!(log.lines().skip(1).all(|l| l.contains(" yes ")), "{log}");
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_wrong_token_is_one_clear_error_and_the_next_run_pushes_everything() {
    let server = GitServer::shared();
    let remote = server.unique_repo("token");
    let t = tree("node-a", &server, &remote, "");
    memory(&t, "t1", "analyst-code", "read the logs first");

    let secret = "wrong-token-0123456789";
    let r = cb(&t, secret, &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let err = r.stderr.trim();
    assert!(err.contains(&format!("archive remote {remote}: authentication failed")), "{err}");
    assert!(err.contains("$CLAWBOARD_GIT_TOKEN") && err.contains("\"clawboard\""), "{err}");
    assert!(!err.contains(secret) && !r.stdout.contains(secret), "the token leaked: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let st = status(&t);
    assert_eq!((st["commits"].as_u64(), st["pending"].as_u64()), (Some(1), Some(1)), "{st}");
    assert!(st["lastError"].as_str().unwrap().contains("authentication failed"), "{st}");
    assert!(!std::fs::read_to_string(t.root.join(".clawboard/archive/status.json")).unwrap().contains(secret));

    // No token at all: the error says what to set.
    let r = cb(&t, "", &["archive", "now"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("no token (set CLAWBOARD_GIT_TOKEN or GITHUB_TOKEN, or archive.token_file)"),
        "{}",
        r.stderr
    );

    // The right token, from a token file this time: the commit made while the token was wrong lands.
    let file = t.scratch("token", format!("{}\n", server.token).as_bytes());
    let cfg = std::fs::read_to_string(t.dir.path().join("clawboard.toml")).unwrap();
    t.config(&cfg.replace("[archive]\n", &format!("[archive]\ntoken_file = \"{}\"\n", file.display())));
    // Others may read it: refused, the file and the fix named, nothing sent.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let r = cb(&t, "", &["archive", "now"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("(archive.token_file): group or others have access to it (mode 644)"), "{}", r.stderr);
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let ok = cb(&t, "", &["archive", "now"]);
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    let st = status(&t);
    assert_eq!((st["commits"].as_u64(), st["pending"].as_u64()), (Some(1), Some(0)), "{st}");
    assert!(st["lastError"].is_null(), "{st}");
    let scratch = tempfile::tempdir().unwrap();
    let c = clone(&server, &remote, scratch.path());
    assert!(c.join("memory/roles/analyst-code/t1.json").exists());
    let lines = std::fs::read_to_string(c.join("memory/cross-pollination/analyst-code--critic-writing.jsonl")).unwrap();
    assert!(lines.contains("\"pattern\":\"read the logs first\""), "{lines}");
}

#[test]
fn with_the_server_down_the_commit_waits_and_the_daemon_pushes_it_later() {
    let scratch = tempfile::tempdir().unwrap();
    let mut server = GitServer::start(&scratch.path().join("git"));
    let remote = server.new_repo("down");
    server.stop();
    let t = tree("node-a", &server, &remote, "");
    memory(&t, "t1", "analyst-code", "x");
    let r = cb(&t, &server.token, &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&format!("archive remote {remote}: push")), "{}", r.stderr);
    assert_eq!(status(&t)["pending"], 1);
    // The commit is reported, with what it holds, and that its push is retried.
    let commit = status(&t)["lastCommit"].as_str().unwrap().to_owned();
    let short = &commit[..12];
    assert!(r.stdout.contains(&format!("archive: commit {short} on memory (")), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("archive: not pushed to {remote}")), "{}", r.stdout);
    assert!(
        r.stderr.contains(&format!("commit {short} was made locally (")) && r.stderr.contains("roles 1"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("the push failed and is retried on the next run"), "{}", r.stderr);
    let knowledge: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("shared/knowledge-sync.json")).unwrap()).unwrap();
    assert_eq!(knowledge["nodes"]["node-a"]["lastArchiveCommit"], commit.as_str(), "{knowledge}");
    memory(&t, "t3", "analyst-code", "z");
    let json = cb(&t, &server.token, &["archive", "now", "--json"]);
    assert_eq!(json.code, 1, "{}{}", json.stdout, json.stderr);
    let json = json.json();
    assert_eq!(json["archive"]["commit"]["kinds"]["roles"], 1, "{json}");
    assert_eq!(json["archive"]["commit"]["commit"], status(&t)["lastCommit"], "{json}");
    assert!(json["error"].as_str().unwrap().contains("was made locally"), "{json}");

    // The daemon, scheduled once a year: only its retries can push. It starts with a
    // commit pending, so it retries after 1 s, then 2 s, 4 s …; its first run commits
    // t2 and says so, though it cannot push it.
    let cfg = std::fs::read_to_string(t.dir.path().join("clawboard.toml")).unwrap();
    t.config(&cfg.replace("[archive]\n", "[archive]\nschedule = \"0 0 1 1 *\"\nretry = \"1s\"\n"));
    memory(&t, "t2", "analyst-code", "y");
    let mut cmd = t.command(&["--config", t.dir.path().join("clawboard.toml").to_str().unwrap(), "daemon"]);
    let log = t.dir.path().join("daemon.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut d = cmd.env("CLAWBOARD_GIT_TOKEN", &server.token).stdout(f.try_clone().unwrap()).stderr(f).spawn().unwrap();
    wait_until(30, "a failed run of the daemon", || std::fs::read_to_string(&log).unwrap().contains("archive failed"));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("archive: committed (") && text.contains("was made locally ("), "{text}");
    assert_eq!(status(&t)["pending"], 3);
    server.restart();
    wait_until(30, "the daemon to push", || status(&t)["pending"] == 0 && status(&t)["commits"].as_u64() >= Some(2));
    assert!(std::fs::read_to_string(&log).unwrap().contains("the last run did not finish; retrying"));
    d.kill().unwrap();
    d.wait().unwrap();
    let c = clone(&server, &remote, scratch.path());
    assert!(c.join("memory/roles/analyst-code/t1.json").exists());
    assert!(c.join("memory/roles/analyst-code/t2.json").exists());
    assert!(c.join("memory/roles/analyst-code/t3.json").exists());
}

#[test]
fn without_a_remote_commits_stay_local_and_a_huge_file_is_refused_by_name() {
    let t = Tree::init();
    t.config("[node]\nid = \"solo\"\n");
    memory(&t, "t1", "analyst-code", "kept");
    let big = t.root.join("reports/daily/2026-11-20.md");
    std::fs::write(&big, vec![b'x'; (50 << 20) + 1]).unwrap();
    let r = cb(&t, "", &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("reports/daily/2026-11-20.md: 52428801 bytes is more than the archive's limit of 52428800"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("no remote (archive.remote): the commits stay"), "{}", r.stdout);
    let repo = t.root.join(".clawboard/archive/memory.git");
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "memory"]);
    assert!(files.contains("memory/roles/analyst-code/t1.json"), "{files}");
    assert!(!files.contains("2026-11-20.md"), "{files}");
    let st = status(&t);
    assert!(st["remote"].is_null() && st["pending"] == 0, "{st}");
    // `clawboard status` shows it too.
    let overall = cb(&t, "", &["status", "--json"]).ok().json();
    assert_eq!(overall["archive"]["commits"], 1, "{overall}");
    assert!(cb(&t, "", &["status"]).ok().stdout.contains("archive      1 commit(s) on memory, the last "));
    assert!(st["lastError"].as_str().unwrap().contains("reports/daily/2026-11-20.md"), "{st}");
    // Once the file is fixed, it is archived on the next run.
    std::fs::write(&big, "# a normal report\n").unwrap();
    cb(&t, "", &["archive", "now"]).ok();
    assert!(git(&repo, &["ls-tree", "-r", "--name-only", "memory"]).contains("memory/reports/daily/2026-11-20.md"));
    assert!(status(&t)["lastError"].is_null());
}

/// A generated file over the limit (the lines of two tasks' candidates, each task
/// under it) is refused on every run until it fits, not only on the first: its
/// sources are read again, and archived once the limit allows.
#[test]
fn a_generated_file_over_the_limit_is_refused_until_it_fits() {
    let t = Tree::init();
    let candidates = |task: &str| {
        let dir = t.root.join("tasks").join(task);
        std::fs::create_dir_all(&dir).unwrap();
        let c: Vec<_> = (0..10)
            .map(|k| serde_json::json!({"fromRole": "a", "toRole": "b", "pattern": format!("pattern-{task}-{k}"), "value": 0.5}))
            .collect();
        let h = serde_json::json!({"taskId": task, "harvestedAt": now(), "experiences": [], "crossPollinationCandidates": c});
        std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec(&h).unwrap()).unwrap();
    };
    t.config("[node]\nid = \"solo\"\n[archive]\nmax_file_size = 1500\n");
    candidates("t1");
    cb(&t, "", &["archive", "now", "--no-harvest"]).ok();
    candidates("t2");
    for _ in 0..2 {
        let r = cb(&t, "", &["archive", "now", "--no-harvest"]);
        assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("memory/cross-pollination/a--b.jsonl"), "{}", r.stderr);
        assert!(status(&t)["lastError"].as_str().unwrap().contains("a--b.jsonl"));
    }
    t.config("[node]\nid = \"solo\"\n");
    cb(&t, "", &["archive", "now", "--no-harvest"]).ok();
    let repo = t.root.join(".clawboard/archive/memory.git");
    let lines = git(&repo, &["show", "memory:memory/cross-pollination/a--b.jsonl"]);
    assert!(lines.contains("pattern-t2-9") && lines.contains("pattern-t1-0"), "{lines}");
    assert!(status(&t)["lastError"].is_null());
}

#[test]
fn archive_commands_refuse_when_the_archive_is_off() {
    let t = Tree::init();
    t.config("[archive]\nenabled = false\n");
    let r = cb(&t, "", &["archive", "status"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("archive.enabled = false"), "{}", r.stderr);
}

#[test]
fn harvest_on_the_command_line_is_idempotent() {
    let t = Tree::init();
    memory(&t, "t1", "analyst-code", "once");
    let first = t.run(&["harvest", "--json"]).ok().json();
    assert_eq!(first["written"].as_array().unwrap().len(), 2, "{first}");
    let again = t.run(&["harvest", "--json"]).ok().json();
    assert_eq!(again["written"], serde_json::json!([]), "{again}");
    let r = t.run(&["harvest", "--date", "yesterday"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--date"), "{}", r.stderr);
}

#[test]
fn a_push_the_remote_refuses_for_good_is_reported_with_its_reason_at_once() {
    let server = GitServer::shared();
    let remote = server.unique_repo("hook");
    let name = remote.rsplit('/').next().unwrap();
    let hook = server.root.join(name).join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'memory pushes are closed today' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let t = tree("node-a", &server, &remote, "push_attempts = 5");
    memory(&t, "t1", "analyst-code", "x");
    let started = std::time::Instant::now();
    let r = cb(&t, &server.token, &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&format!("archive remote {remote}: push: the remote refused it:")), "{}", r.stderr);
    assert!(r.stderr.contains("pre-receive hook declined"), "{}", r.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(3), "no backoff for a refusal that is not a race");
    assert_eq!(status(&t)["pending"], 1);
}

#[test]
fn an_ssh_remote_takes_the_key_file_checks_the_host_key_and_names_what_failed() {
    let scratch = tempfile::tempdir().unwrap();
    let ssh = SshServer::start(&scratch.path().join("sshd"));
    let bare = scratch.path().join("memory.git");
    git(scratch.path(), &["init", "--quiet", "--bare", "--initial-branch=main", bare.to_str().unwrap()]);
    let url = ssh.url(&bare);
    let t = Tree::init();
    let with_key = |key: &Path| {
        format!("[node]\nid = \"node-s\"\n[archive]\nremote = \"{url}\"\nssh_key = \"{}\"\n", key.display())
    };
    t.config(&with_key(&ssh.client_key));
    memory(&t, "t1", "analyst-code", "over ssh");
    let shown = format!("ssh://127.0.0.1:{}{}", ssh.port, bare.display());

    // The host is not in ~/.ssh/known_hosts yet: refused, and the error says what to do.
    let r = cb(&t, "", &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!("archive remote {shown}: push: invalid or unknown remote ssh hostkey")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("known_hosts"), "{}", r.stderr);

    let ssh_dir = t.dir.path().join("home/.ssh");
    std::fs::create_dir_all(&ssh_dir).unwrap();
    std::fs::write(ssh_dir.join("known_hosts"), &ssh.known_hosts_line).unwrap();
    // A key the server does not accept: named, and nothing lost.
    let other = scratch.path().join("other_key");
    let ok = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    t.config(&with_key(&other));
    let r = cb(&t, "", &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let want = format!("archive remote {shown}: authentication failed with the SSH key {} as user", other.display());
    assert!(r.stderr.contains(&want), "{}", r.stderr);

    // The right key: pushed; the git CLI sees the commit in the bare repository.
    t.config(&with_key(&ssh.client_key));
    let r = cb(&t, "", &["archive", "now"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let files = git(&bare, &["ls-tree", "-r", "--name-only", "memory"]);
    assert!(files.contains("memory/roles/analyst-code/t1.json"), "{files}");
    assert_eq!(status(&t)["pending"], 0);
}

/// `a--b` + `c` and `a` + `b--c` would share `memory/cross-pollination/a--b--c.jsonl`:
/// a configured role id with `--` is refused when the config is loaded, naming the
/// file and the role; a harvest naming one is refused by file and field, and the
/// other tasks are archived.
#[test]
fn a_role_id_with_two_dashes_is_refused_in_the_config_and_in_a_harvest() {
    let t = Tree::init();
    let cfg = t.config("[node]\nid = \"solo\"\n\n[roles.writer--a]\ncommand = [\"true\"]\n");
    let r = cb(&t, "", &["archive", "status"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    let want = format!("{}: key roles.writer--a: the role id contains \"--\"", cfg.display());
    assert!(r.stderr.contains(&want) && r.stderr.contains("cross-pollination"), "{}", r.stderr);

    t.config("[node]\nid = \"solo\"\n");
    memory(&t, "t1", "analyst-code", "kept");
    let dir = t.root.join("tasks/t2");
    std::fs::create_dir_all(&dir).unwrap();
    let h = serde_json::json!({
        "taskId": "t2",
        "harvestedAt": now(),
        "experiences": [{"roleId": "analyst-code", "cells": [{"type": "insight", "content": "c", "value": 0.7}]}],
        "crossPollinationCandidates": [{"fromRole": "a--b", "toRole": "c", "pattern": "p", "value": 0.6}],
    });
    std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec(&h).unwrap()).unwrap();
    for _ in 0..2 {
        let r = cb(&t, "", &["archive", "now", "--no-harvest"]);
        assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(
                "tasks/t2/memory-harvest.json: /crossPollinationCandidates/0/fromRole: \"a--b\" contains \"--\""
            ),
            "refused on every run, not only the first: {}",
            r.stderr
        );
    }
    let repo = t.root.join(".clawboard/archive/memory.git");
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "memory"]);
    assert!(files.contains("memory/roles/analyst-code/t1.json"), "{files}");
    assert!(!files.contains("t2.json") && !files.contains("a--b--c"), "{files}");
}

/// A remote that accepts the connection and then never answers holds the archive
/// run (libgit2 has no timeout clawboard can set), not the daemon's stop: it exits
/// within 5 s of SIGTERM, as docs/ARCHIVE.md says.
#[test]
fn a_stopping_daemon_does_not_wait_long_for_a_remote_that_never_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let t = Tree::init();
    t.config(&format!(
        "[node]\nid = \"solo\"\n\n[archive]\nremote = \"http://127.0.0.1:{port}/memory.git\"\nschedule = \"* * * * * *\"\n"
    ));
    memory(&t, "t1", "analyst-code", "x");
    let d = t.daemon();
    let mut held = Vec::new();
    wait_until(30, "the archive run to connect to the remote", || match listener.accept() {
        Ok((conn, _)) => {
            held.push(conn);
            true
        }
        Err(_) => false,
    });
    let log = d.log.clone();
    let started = std::time::Instant::now();
    let code = d.stop();
    let took = started.elapsed();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{text}");
    assert!(took < std::time::Duration::from_secs(5), "the daemon took {took:?} to stop:\n{text}");
    assert!(text.contains("archive: a run is still waiting for the remote"), "{text}");
}
