//! `clawboard doctor` against the real test servers (s3s-fs and moto, the git
//! server, the GitHub simulator, the local model server), each fault made for
//! real: a wrong key, a stopped server, a token the remote refuses, a model the
//! server does not serve, a bad config, a root that is not a blackboard.

use std::collections::BTreeMap;
use std::process::Stdio;

use clawboard_tests::git::GitServer;
use clawboard_tests::s3::{Bucket, Kind, Server};
use clawboard_tests::{Run, Tree};

use crate::github::sim;

/// `clawboard --config … --json doctor` with `env`.
fn doctor(t: &Tree, env: &[(&str, &str)]) -> Run {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut c = t.command(&["--config", cfg.to_str().unwrap(), "--json", "doctor"]);
    c.envs(env.iter().copied());
    Run::from(c.stdin(Stdio::null()).output().unwrap())
}

/// Each check's level and detail, by name.
fn levels(r: &Run) -> BTreeMap<String, (String, String)> {
    let checks = r.json();
    let checks = checks.as_array().unwrap_or_else(|| panic!("not a list of checks: {r:?}"));
    checks
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("check"), (s("level"), s("detail")))
        })
        .collect()
}

fn level(r: &Run, check: &str) -> (String, String) {
    levels(r).remove(check).unwrap_or_else(|| panic!("no check {check}: {r:?}"))
}

fn model_server() -> String {
    std::env::var("CLAWBOARD_TEST_LLM")
        .expect("CLAWBOARD_TEST_LLM is not set: run the suite through scripts/test, which starts scripts/llm-server")
}

/// A PM for every task type, which doctor asks for (the example PM).
const TEAM: &str = "\n[lifecycle.pm_for_type]\ncoding = \"pm\"\nwriting = \"pm\"\nresearch = \"pm\"\nquant = \"pm\"\n\n[roles.pm]\ncommand = [\"python3\", \"scripts/roles/pm.py\"]\n";

/// Sync on `bucket`, the archive on a fresh repository of the git server,
/// the GitHub bridge on `repo`, one model provider of `model`.
fn config(t: &Tree, bucket: &Bucket, git: &GitServer, repo: &sim::Repo, model: &str) {
    let remote = git.unique_repo("doctor");
    t.config(&format!(
        "{}\n{}\n{}\nenabled = true\n\n[llm.providers.local]\nbase_url = {:?}\nmodel = {model:?}\n{TEAM}",
        bucket.sync_config(t.dir.path(), "schedule = \"0 0 0 1 1 *\""),
        clawboard_tests::archive::archive_config("doctor", git, &remote, ""),
        repo.config(""),
        model_server(),
    ));
}

#[test]
fn a_good_setup_passes_every_check() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::S3s, t.dir.path());
    let git = GitServer::shared();
    let repo = sim::Repo::new("doctor", &[]);
    config(&t, &bucket, &git, &repo, "gemma-3-270m");
    let token = sim::token();
    let r = doctor(&t, &[("CLAWBOARD_GIT_TOKEN", &git.token), ("GITHUB_TOKEN", &token)]);
    assert_eq!(r.code, 0, "{r:?}");
    let all = levels(&r);
    for check in [
        "config",
        "root",
        "root.filesystem",
        "inotify",
        "sandbox",
        "bucket",
        "bucket.conditional",
        "bucket.clock",
        "archive",
        "github",
        "model llm.providers.local",
    ] {
        assert_eq!(all.get(check).map(|(l, _)| l.as_str()), Some("ok"), "{check}: {all:#?}");
    }
    assert!(all["bucket"].1.contains(&bucket.name), "{all:#?}");
    // s3s-fs's listings carry no ETags: a warning (more HEADs), not a failure.
    assert_eq!(all["bucket.etags"].0, "warn", "{all:#?}");
    assert!(all["bucket.etags"].1.contains("listings carry no ETags"), "{all:#?}");
    assert!(all["archive"].1.contains("branch memory is made by the first push"), "{all:#?}");
    let model = &all["model llm.providers.local"].1;
    assert!(
        model.contains(
            "(gemma-3-270m): serves the model; a schema-shaped request was answered with reply_format json_schema in "
        ),
        "{all:#?}"
    );
    assert!(bucket.all_objects().keys().all(|k| !k.starts_with("_doctor/")), "the probe object is removed");
    for secret in [&git.token, &token, &bucket.secret] {
        assert!(!r.stdout.contains(secret.as_str()) && !r.stderr.contains(secret.as_str()), "a secret was printed");
    }

    // The same, for people: one line per check, the level first.
    let cfg = t.dir.path().join("clawboard.toml");
    let mut c = t.command(&["--config", cfg.to_str().unwrap(), "doctor"]);
    c.envs([("CLAWBOARD_GIT_TOKEN", git.token.as_str()), ("GITHUB_TOKEN", token.as_str())]);
    let text = Run::from(c.stdin(Stdio::null()).output().unwrap());
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stdout.lines().any(|l| l.starts_with("ok    bucket.conditional ")), "{}", text.stdout);
}

#[test]
fn every_fault_is_named_with_its_fix() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::S3s, t.dir.path());
    let wrong_key = Bucket { secret: "not-the-secret".into(), ..bucket.clone() };
    let git = GitServer::shared();
    let repo = sim::Repo::new("doctor-faults", &[]);
    config(&t, &wrong_key, &git, &repo, "no-such-model");
    let r = doctor(&t, &[("CLAWBOARD_GIT_TOKEN", "not-the-git-token"), ("GITHUB_TOKEN", "not-the-github-token")]);
    assert_eq!(r.code, 1, "{r:?}");
    for (check, says) in [
        ("bucket", "403"),
        ("archive", "authentication failed with the token in $CLAWBOARD_GIT_TOKEN"),
        ("github", "401"),
        ("model llm.providers.local", "no-such-model"),
    ] {
        let (l, d) = level(&r, check);
        assert_eq!(l, "fail", "{check}: {d}");
        assert!(d.contains(says), "{check}: {d}");
    }
    for secret in ["not-the-secret", "not-the-git-token", "not-the-github-token"] {
        assert!(!r.stdout.contains(secret) && !r.stderr.contains(secret), "{secret} was printed: {r:?}");
    }
    // Each failure says what to do.
    let checks = r.json();
    for c in checks.as_array().unwrap().iter().filter(|c| c["level"] == "fail") {
        assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "no fix: {c}");
    }
}

#[test]
fn a_stopped_server_and_a_model_server_that_is_down_are_unreachable() {
    let t = Tree::init();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(Kind::S3s, dir.path());
    let bucket = server.bucket();
    server.stop();
    t.config(&format!(
        "{}\n[llm.providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
        bucket.sync_config(t.dir.path(), "schedule = \"0 0 0 1 1 *\"")
    ));
    let r = doctor(&t, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let checks = r.json();
    let bucket_check = checks.as_array().unwrap().iter().find(|c| c["check"] == "bucket").unwrap();
    assert_eq!(bucket_check["level"], "fail", "{bucket_check}");
    assert!(bucket_check["fix"].as_str().unwrap().starts_with("start the server"), "{bucket_check}");
    let (l, d) = level(&r, "model llm.providers.local");
    assert_eq!(l, "fail");
    assert!(d.starts_with("GET http://127.0.0.1:9/v1/models: "), "{d}");
    // Nothing else was asked of it: no archive remote, no bridge.
    assert_eq!(level(&r, "archive").0, "ok");
    assert_eq!(level(&r, "github").0, "ok");
}

#[test]
fn moto_honours_conditional_creates_and_lists_etags() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::Moto, t.dir.path());
    t.config(&format!("{}{TEAM}", bucket.sync_config(t.dir.path(), "schedule = \"0 0 0 1 1 *\"")));
    let r = doctor(&t, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(level(&r, "bucket.conditional").0, "ok");
    assert_eq!(level(&r, "bucket.etags").0, "ok");
}

#[test]
fn a_bad_config_and_a_root_that_is_no_blackboard_fail_their_checks() {
    let t = Tree::init();
    t.config("[sync]\nschedule = \"hourly\"\n");
    let r = doctor(&t, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let (l, d) = level(&r, "config");
    assert_eq!(l, "fail");
    assert!(d.contains("key sync.schedule"), "{d}");
    assert_eq!(levels(&r).len(), 1, "nothing else is checked without a config");

    let empty = tempfile::tempdir().unwrap();
    let mut c = t.command_no_root(&["--root", empty.path().to_str().unwrap(), "--json", "doctor", "--offline"]);
    let r = Run::from(c.stdin(Stdio::null()).output().unwrap());
    assert_eq!(r.code, 1, "{r:?}");
    let checks = r.json();
    let root = checks.as_array().unwrap().iter().find(|c| c["check"] == "root").unwrap();
    assert_eq!(root["level"], "fail");
    assert!(root["fix"].as_str().unwrap().ends_with(" init"), "{root}");
    assert!(checks.as_array().unwrap().iter().all(|c| c["check"] != "bucket"), "--offline asks no server");
}

#[test]
fn a_team_without_a_pm_or_with_a_missing_program_fails_naming_it() {
    let t = Tree::init();
    // No PM for research or quant; a role whose script is not where the daemon looks.
    t.config(
        "[lifecycle.pm_for_type]\ncoding = \"pm\"\nwriting = \"pm\"\n\n[roles.pm]\ncommand = [\"python3\", \"scripts/roles/pm.py\"]\n\n[roles.lost]\ncommand = [\"python3\", \"roles/lost.py\"]\n",
    );
    let cfg = t.dir.path().join("clawboard.toml");
    let mut c = t.command(&["--config", cfg.to_str().unwrap(), "--json", "doctor", "--offline"]);
    let r = Run::from(c.stdin(Stdio::null()).output().unwrap());
    assert_eq!(r.code, 1, "{r:?}");
    let (l, d) = level(&r, "team.pm");
    assert_eq!(l, "fail");
    assert!(d.starts_with("no PM for research, quant: "), "{d}");
    let (l, d) = level(&r, "team.roles");
    assert_eq!(l, "fail");
    assert!(
        d.starts_with("roles.lost: roles/lost.py: no such file (relative to the daemon's working directory, here "),
        "{d}"
    );
    // No validator, no harvester: warnings that say what that means.
    let (l, d) = level(&r, "team.validator");
    assert_eq!(
        (l.as_str(), d.as_str()),
        ("warn", "no validator: every team result passes unchecked and no task iterates")
    );
    assert_eq!(level(&r, "team.harvester").0, "warn");
    // Every line says something: no empty detail (the blueprints line included).
    for c in r.json().as_array().unwrap() {
        assert!(!c["detail"].as_str().unwrap().trim().is_empty(), "{c}");
        assert!(!c["detail"].as_str().unwrap().ends_with(": "), "{c}");
    }
}
