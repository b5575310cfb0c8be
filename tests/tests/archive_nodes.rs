//! The memory archive with two nodes on one branch of the real git server: pushes
//! at once, the same file changed on both, and what counts as pending after a
//! merge of the other node's commits.

use std::process::Stdio;

use clawboard_tests::Tree;
use clawboard_tests::archive::{cb, clone, memory, status, subjects, tree};
use clawboard_tests::git::{GitServer, git};

#[test]
fn two_nodes_pushing_at_once_both_land_and_no_file_is_lost() {
    let server = GitServer::shared();
    let remote = server.unique_repo("two");
    let a = tree("node-a", &server, &remote, "push_attempts = 10");
    let b = tree("node-b", &server, &remote, "push_attempts = 10");
    let mut expected = Vec::new();
    for round in 0..4 {
        memory(&a, &format!("a-{round}"), "analyst-code", &format!("a says {round}"));
        memory(&b, &format!("b-{round}"), "analyst-code", &format!("b says {round}"));
        expected.push(format!("memory/roles/analyst-code/a-{round}.json"));
        expected.push(format!("memory/roles/analyst-code/b-{round}.json"));
        // Both at once.
        let spawn = |t: &Tree| {
            let cfg = t.dir.path().join("clawboard.toml");
            t.command(&["--config", cfg.to_str().unwrap(), "archive", "now"])
                .env("CLAWBOARD_GIT_TOKEN", &server.token)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (pa, pb) = (spawn(&a), spawn(&b));
        for p in [pa, pb] {
            let out = p.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let scratch = tempfile::tempdir().unwrap();
    let c = clone(&server, &remote, scratch.path());
    for f in &expected {
        assert!(c.join(f).exists(), "{f} is missing from the branch");
    }
    // Both nodes' lines of the shared cross-pollination file, merged by union.
    let lines = std::fs::read_to_string(c.join("memory/cross-pollination/analyst-code--critic-writing.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 8, "{lines}");
    // Every commit of each node is reachable from the branch.
    let log = subjects(&c);
    for node in ["node-a", "node-b"] {
        assert_eq!(log.iter().filter(|s| s.starts_with(&format!("memory: sync from {node}"))).count(), 4, "{log:?}");
    }
    // History was never rewritten: each node's last pushed head is in the branch.
    for t in [&a, &b] {
        let head = status(t)["lastPushed"].as_str().unwrap().to_owned();
        git(&c, &["merge-base", "--is-ancestor", &head, "HEAD"]);
    }
}

#[test]
fn the_same_file_written_differently_by_two_nodes_keeps_both_versions() {
    let server = GitServer::shared();
    let remote = server.unique_repo("conflict");
    let a = tree("node-a", &server, &remote, "");
    let b = tree("node-b", &server, &remote, "");
    std::fs::write(a.root.join("gm/decisions.md"), "# decisions\n\nA decided.\n").unwrap();
    std::fs::write(b.root.join("gm/decisions.md"), "# decisions\n\nB decided.\n").unwrap();
    cb(&a, &server.token, &["archive", "now"]).ok();
    // B commits while it cannot reach the remote (no token): its commit does not
    // descend from A's, so its push is rejected and it merges.
    assert_eq!(cb(&b, "", &["archive", "now"]).code, 1);
    let r = cb(&b, &server.token, &["archive", "now", "--json"]).ok().json();
    assert_eq!(r["archive"]["push"]["merges"], 1, "{r}");
    let scratch = tempfile::tempdir().unwrap();
    let c = clone(&server, &remote, scratch.path());
    assert_eq!(std::fs::read_to_string(c.join("memory/gm/decisions.md")).unwrap(), "# decisions\n\nA decided.\n");
    assert_eq!(
        std::fs::read_to_string(c.join("memory/gm/decisions.conflict-node-b.md")).unwrap(),
        "# decisions\n\nB decided.\n"
    );
    // The merge is stable: nothing changes on the next runs of either node.
    cb(&b, &server.token, &["archive", "now"]).ok();
    cb(&a, &server.token, &["archive", "now"]).ok();
    git(&c, &["pull", "--quiet", "--ff-only"]);
    let log = subjects(&c);
    assert_eq!(log.len(), 3, "two syncs and one merge: {log:?}");
    assert!(log[0].starts_with("memory: merge "), "{log:?}");
}

/// Pending counts what the remote does not have: a node that fetched and merged
/// other nodes' commits, and then could not push, has its own commit and the merge
/// pending, not the commits it fetched (the remote has those); `archive log` says
/// the remote has them; once it pushes, nothing is pending.
#[test]
fn commits_merged_from_another_node_are_not_pending() {
    let server = GitServer::shared();
    let remote = server.unique_repo("pending");
    let a = tree("node-a", &server, &remote, "");
    let b = tree("node-b", &server, &remote, "");
    memory(&a, "a-0", "analyst-code", "a says 0");
    cb(&a, &server.token, &["archive", "now"]).ok();
    // B's first run builds on A's commit.
    memory(&b, "b-0", "analyst-code", "b says 0");
    cb(&b, &server.token, &["archive", "now"]).ok();
    assert_eq!(status(&b)["pending"], 0);
    // A pushes three commits B does not have: its own two and the merge of B's.
    for n in 1..3 {
        memory(&a, &format!("a-{n}"), "analyst-code", &format!("a says {n}"));
        cb(&a, &server.token, &["archive", "now"]).ok();
    }
    assert_eq!(status(&a)["pending"], 0);
    // The remote refuses B's next push after B fetched and merged A's commits.
    let name = remote.rsplit('/').next().unwrap();
    let hook = server.root.join(name).join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'closed for a moment' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    memory(&b, "b-1", "analyst-code", "b says 1");
    let r = cb(&b, &server.token, &["archive", "now"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("pre-receive hook declined"), "{}", r.stderr);
    let st = status(&b);
    assert_eq!((st["commits"].as_u64(), st["pending"].as_u64()), (Some(7), Some(2)), "B's sync and its merge: {st}");
    let log = cb(&b, "", &["archive", "log", "-n", "20", "--json"]).ok().json();
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 7, "{log:?}");
    for e in log {
        let message = e["message"].as_str().unwrap();
        let ours = message.starts_with("memory: sync from node-b")
            || (message.starts_with("memory: merge ") && message.contains(" into node-b at "));
        let first_of_b = e["id"] == st["lastPushed"];
        assert_eq!(e["pushed"], !ours || first_of_b, "{e}");
    }
    std::fs::remove_file(&hook).unwrap();
    cb(&b, &server.token, &["archive", "now"]).ok();
    let st = status(&b);
    assert_eq!((st["commits"].as_u64(), st["pending"].as_u64()), (Some(7), Some(0)), "{st}");
}

#[test]
fn a_file_both_nodes_changed_since_their_common_version_is_kept_twice_not_mixed() {
    let server = GitServer::shared();
    let remote = server.unique_repo("three-way");
    let a = tree("node-a", &server, &remote, "");
    let b = tree("node-b", &server, &remote, "");
    let base = "# decisions\n\none\ntwo\nthree\nfour\nfive\nsix\n";
    std::fs::write(a.root.join("gm/decisions.md"), base).unwrap();
    std::fs::write(b.root.join("gm/decisions.md"), base).unwrap();
    cb(&a, &server.token, &["archive", "now"]).ok();
    cb(&b, &server.token, &["archive", "now"]).ok();
    // Both change it, in lines far apart: a text merge would mix them silently.
    let ours_a = base.replace("one", "one (A)");
    let ours_b = base.replace("six", "six (B)");
    std::fs::write(a.root.join("gm/decisions.md"), &ours_a).unwrap();
    std::fs::write(b.root.join("gm/decisions.md"), &ours_b).unwrap();
    cb(&a, &server.token, &["archive", "now"]).ok();
    let r = cb(&b, &server.token, &["archive", "now", "--json"]).ok().json();
    assert_eq!(r["archive"]["push"]["merges"], 1, "{r}");
    let scratch = tempfile::tempdir().unwrap();
    let c = clone(&server, &remote, scratch.path());
    assert_eq!(std::fs::read_to_string(c.join("memory/gm/decisions.md")).unwrap(), ours_a);
    assert_eq!(std::fs::read_to_string(c.join("memory/gm/decisions.conflict-node-b.md")).unwrap(), ours_b);
}
