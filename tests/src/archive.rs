//! What the memory archive's tests share (tests/tests/archive.rs and
//! archive_nodes.rs): a tree whose archive pushes to the test git server, the CLI
//! with a token, a harvest to archive, and the git CLI's view of the branch.

use std::path::Path;
use std::process::Stdio;

use crate::git::{GitServer, git};
use crate::{Run, Tree};

/// A tree whose archive pushes to `remote` as node `node`.
pub fn tree(node: &str, server: &GitServer, remote: &str, extra: &str) -> Tree {
    let t = Tree::init();
    t.config(&archive_config(node, server, remote, extra));
    t
}

pub fn archive_config(node: &str, server: &GitServer, remote: &str, extra: &str) -> String {
    format!(
        "[node]\nid = \"{node}\"\n\n[archive]\nremote = \"{remote}\"\nusername = \"{}\"\nauthor_name = \"Memory Bot\"\nauthor_email = \"bot@example.invalid\"\n{extra}\n",
        server.user
    )
}

/// `clawboard --config … ARGS` with `token` in `CLAWBOARD_GIT_TOKEN` (none when empty).
pub fn cb(t: &Tree, token: &str, args: &[&str]) -> Run {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut c = t.command(&all);
    if !token.is_empty() {
        c.env("CLAWBOARD_GIT_TOKEN", token);
    }
    Run::from(c.stdin(Stdio::null()).output().unwrap())
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Writes `tasks/{task}/memory-harvest.json` with one cell for `role`, harvested now.
pub fn memory(t: &Tree, task: &str, role: &str, content: &str) {
    let dir = t.root.join("tasks").join(task);
    std::fs::create_dir_all(&dir).unwrap();
    let h = serde_json::json!({
        "taskId": task,
        "harvestedAt": now(),
        "experiences": [{"roleId": role, "cells": [{"type": "insight", "content": content, "value": 0.7}]}],
        "crossPollinationCandidates": [{"fromRole": role, "toRole": "critic-writing", "pattern": content, "value": 0.6}],
    });
    std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec_pretty(&h).unwrap()).unwrap();
}

/// A fresh clone of the branch with the git CLI.
pub fn clone(server: &GitServer, remote: &str, into: &Path) -> std::path::PathBuf {
    let dest = into.join(format!("clone-{}", std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos()));
    git(into, &["clone", "--quiet", "--branch", "memory", &server.authed(remote), dest.to_str().unwrap()]);
    dest
}

pub fn subjects(repo: &Path) -> Vec<String> {
    git(repo, &["log", "--format=%s"]).lines().map(str::to_owned).collect()
}

pub fn status(t: &Tree) -> serde_json::Value {
    cb(t, "", &["archive", "status", "--json"]).ok().json()
}
