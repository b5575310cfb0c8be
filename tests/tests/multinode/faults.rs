//! Faults between nodes and bucket: the server down and back, a mass delete refused,
//! a node away longer than the log, hostile log entries, a new node's defaults, two
//! machines on one node id, files the bucket cannot store, a missing or read-only bucket.

use std::time::Duration;

use clawboard_tests::s3::{Kind, Server};
use clawboard_tests::wait_until;

use super::{Cluster, by_hand, stop_all, sync, tree_hashes};

#[test]
fn the_s3_server_down_for_a_minute_and_back_all_nodes_converge() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(Kind::S3s, dir.path());
    let bucket = server.bucket();
    let c = Cluster::new(&bucket);
    let daemons = c.start();
    for (i, n) in c.nodes.iter().enumerate() {
        n.t.drop_task(
            &format!("before{i}.json"),
            &format!(r#"{{"taskId": "t-before-{i}", "type": "coding", "description": "x"}}"#),
        );
    }
    // Three daemons, each running, pushing and pulling three tasks: on a loaded
    // two-core machine (the suite beside it) this took over 60 s once.
    wait_until(120, "the first tasks everywhere", || {
        c.nodes.iter().all(|n| (0..3).all(|i| n.t.status_of(&format!("t-before-{i}")) == "completed"))
    });
    server.stop();
    // Work goes on locally: edits, and a task that waits for its claim.
    for n in &c.nodes {
        std::fs::write(n.t.root.join(format!("gm/{}.md", n.id)), format!("written on {} during the outage\n", n.id))
            .unwrap();
    }
    c.node("node-c").t.drop_task("during.json", r#"{"taskId": "t-during", "type": "coding", "description": "x"}"#);
    std::thread::sleep(Duration::from_secs(60));
    assert_eq!(c.node("node-c").t.status_of("t-during"), "pending", "no claim without the bucket");
    server.restart();
    wait_until(90, "t-during completed everywhere", || {
        c.nodes.iter().all(|n| n.t.status_of("t-during") == "completed")
    });
    c.converge(60, "after the outage");
    for n in &c.nodes {
        assert!(c.nodes[0].t.root.join(format!("gm/{}.md", n.id)).exists());
    }
    let runs = c.runs();
    assert_eq!(runs.iter().filter(|(t, r, _)| t == "t-during" && r == "pm").count(), 1, "{runs:?}");
    stop_all(daemons);
}

#[test]
fn a_mass_delete_is_refused_and_escalated_until_allowed() {
    let (_s, _bucket, c) = by_hand();
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    for i in 0..30 {
        std::fs::write(a.root.join(format!("gm/n{i}.md")), format!("{i}\n")).unwrap();
    }
    sync(a, &["push"]).ok();
    sync(b, &["pull"]).ok();
    assert!(b.root.join("gm/n29.md").exists());
    for i in 0..25 {
        std::fs::remove_file(a.root.join(format!("gm/n{i}.md"))).unwrap();
    }
    sync(a, &["push"]).ok();
    let before = tree_hashes(&b.root);
    let r = sync(b, &["pull"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("pull refused") && r.stderr.contains("--allow-mass-delete"), "{}", r.stderr);
    let after = tree_hashes(&b.root);
    let added: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert!(before.keys().all(|k| after.contains_key(k)), "nothing was deleted");
    assert!(added.len() == 1 && added[0].starts_with("escalations/"), "only the escalation is new: {added:?}");
    let esc: serde_json::Value = serde_json::from_slice(&std::fs::read(b.root.join(added[0])).unwrap()).unwrap();
    assert_eq!(esc["level"], "normal");
    assert!(esc["issue"].as_str().unwrap().contains("would delete 25"), "{esc}");
    // Refused again until a human allows it; then applied.
    assert_eq!(sync(b, &["pull"]).code, 1);
    sync(b, &["pull", "--allow-mass-delete"]).ok();
    assert!(!b.root.join("gm/n0.md").exists() && b.root.join("gm/n29.md").exists());
}

#[test]
fn a_node_away_longer_than_the_log_reconciles_by_listing() {
    let (_s, bucket, c) = by_hand();
    let (a, cc) = (&c.node("node-a").t, &c.node("node-c").t);
    for round in 0..3 {
        std::fs::write(a.root.join(format!("gm/r{round}.md")), "x\n").unwrap();
        sync(a, &["push"]).ok();
    }
    // The oldest segments expired (as `sync.log_retention` would have it).
    let remote = bucket.remote();
    let rt = clawboard_tests::s3::runtime();
    let first: Vec<String> = bucket.all_objects().into_keys().filter(|k| k.starts_with("_log/node-a/")).collect();
    assert!(first.len() >= 3, "{first:?}");
    rt.block_on(async { clawboard_sync::Remote::delete(&remote, &first[0]).await }).unwrap();
    let r = sync(cc, &["pull", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["full"], true, "{}", r.stdout);
    assert_eq!(tree_hashes(&cc.root), tree_hashes(&a.root));
    // From then on, incremental again.
    std::fs::write(a.root.join("gm/after.md"), "y\n").unwrap();
    sync(a, &["push"]).ok();
    let r = sync(cc, &["pull", "--json"]);
    assert_eq!(r.json()["full"], false, "{}", r.stdout);
    assert_eq!(r.json()["applied"], 1, "{}", r.stdout);
    assert_eq!(tree_hashes(&cc.root), tree_hashes(&a.root));
}

#[test]
fn hostile_log_entries_are_skipped_and_change_nothing() {
    let (_s, bucket, c) = by_hand();
    let b = &c.node("node-b").t;
    sync(b, &["pull"]).ok(); // the first pull (a listing) is behind it
    let remote = bucket.remote();
    let rt = clawboard_tests::s3::runtime();
    let put = |key: &str, body: &str| {
        rt.block_on(async {
            clawboard_sync::Remote::put(
                &remote,
                key,
                clawboard_sync::Body::Bytes(body.to_owned().into()),
                &Default::default(),
                &clawboard_sync::Condition::None,
            )
            .await
        })
        .unwrap();
    };
    put("_nodes/evil.json", r#"{"node":"evil","seenAt":"2026-11-22T00:00:00Z","version":"0"}"#);
    let entry =
        |p: &str| format!(r#"{{"p":{p:?},"op":"put","h":"00","s":1,"t":1,"a":"evil","v":{{"evil":99999999999999}}}}"#);
    let paths = [
        "../outside.md",
        "/etc/passwd",
        ".clawboard/node-id",
        "_claims/t-x",
        "gm/../../x.md",
        "shared/node-status.json",
    ];
    let entries: Vec<String> = paths.iter().map(|p| entry(p)).collect();
    put(
        "_log/evil/00000000000000000001",
        &format!(r#"{{"node":"evil","seq":1,"writtenAt":"2026-11-22T00:00:00Z","entries":[{}]}}"#, entries.join(",")),
    );
    put("_log/evil/00000000000000000002", "not json at all");
    let before = tree_hashes(&b.root);
    let node_id = std::fs::read(b.root.join(".clawboard/node-id")).ok();
    let r = sync(b, &["pull", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let skipped = r.json()["skipped"].to_string();
    for p in ["../outside.md", "/etc/passwd", ".clawboard/node-id", "not a change-log segment"] {
        assert!(skipped.contains(p), "{p} reported as skipped: {skipped}");
    }
    assert_eq!(tree_hashes(&b.root), before, "the tree is unchanged");
    assert_eq!(std::fs::read(b.root.join(".clawboard/node-id")).ok(), node_id);
    assert!(!b.dir.path().join("outside.md").exists());
}

#[test]
fn a_new_node_never_overwrites_the_shared_files_with_its_defaults() {
    let (_s, _bucket, c) = by_hand();
    let (a, n) = (&c.node("node-a").t, &c.node("node-c").t);
    let limits = "{\n  \"limits\": {\"maxConcurrentTasks\": 4},\n  \"updatedBy\": \"human\"\n}\n";
    std::fs::write(a.root.join("shared/risk-limits.json"), limits).unwrap();
    std::fs::write(a.root.join("gm/decisions.md"), "# GM decisions\n\n- a real decision\n").unwrap();
    std::fs::write(a.root.join("gm/notes.md"), "a's notes\n").unwrap();
    sync(a, &["push"]).ok();
    // The new node pushes before it ever pulled: its defaults and its own notes.md.
    std::fs::write(n.root.join("gm/notes.md"), "c's own notes\n").unwrap();
    let r = sync(n, &["push", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.json()["deferred"].as_u64().unwrap() >= 3, "{}", r.stdout);
    sync(n, &["pull"]).ok();
    sync(n, &["push"]).ok();
    sync(a, &["pull"]).ok();
    assert_eq!(std::fs::read_to_string(a.root.join("shared/risk-limits.json")).unwrap(), limits);
    assert_eq!(std::fs::read_to_string(n.root.join("shared/risk-limits.json")).unwrap(), limits);
    assert!(std::fs::read_to_string(n.root.join("gm/decisions.md")).unwrap().contains("a real decision"));
    assert_eq!(std::fs::read_to_string(n.root.join("gm/notes.md")).unwrap(), "a's notes\n");
    // The defaults vanish quietly; c's own notes are kept beside a's, on both nodes.
    for t in [a, n] {
        let copies: Vec<String> = walkdir::WalkDir::new(&t.root)
            .into_iter()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.contains(".conflict-"))
            .collect();
        assert_eq!(copies.len(), 1, "{copies:?}");
        assert!(copies[0].starts_with("notes.conflict-node-c-"), "{copies:?}");
    }
    assert_eq!(tree_hashes(&a.root), tree_hashes(&n.root));
}

#[test]
fn two_machines_sharing_a_node_id_are_reported() {
    let (_s, _bucket, c) = by_hand();
    // node-b's config, given node-a's id (a cloned machine).
    let b = &c.node("node-b").t;
    let cfg = b.dir.path().join("clawboard.toml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("id = \"node-b\"", "id = \"node-a\"");
    std::fs::write(&cfg, text).unwrap();
    let daemons = vec![c.node("node-a").t.daemon(), b.daemon()];
    wait_until(30, "an escalation about the shared node id", || {
        [&c.node("node-a").t, b].iter().any(|t| {
            std::fs::read_dir(t.root.join("escalations"))
                .unwrap()
                .flatten()
                .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|s| s.contains("two machines share this node id")))
        })
    });
    assert!(daemons.iter().any(|d| d.output().contains("two machines share this node id")));
    stop_all(daemons);
}

/// A file the local bucket cannot store (a 255-byte name; a name whose metadata
/// collides with another's) is left out of the push with a warning; every other
/// change, deletes too, still goes out, and the push is clean once it is gone.
#[test]
fn a_file_the_bucket_cannot_store_does_not_stop_the_push() {
    let (_s, bucket, c) = by_hand();
    let (a, b) = (&c.node("node-a").t, &c.node("node-b").t);
    sync(a, &["push"]).ok();
    sync(b, &["pull"]).ok();
    let long = format!("gm/{}.md", "x".repeat(252));
    std::fs::write(a.root.join(&long), "long\n").unwrap();
    // `gm/x`'s metadata is the file `.clawboard-meta/gm/x.json`, where `gm/x.json/y`'s
    // needs a directory: one of the two cannot be stored.
    std::fs::write(a.root.join("gm/x"), "one\n").unwrap();
    std::fs::create_dir(a.root.join("gm/x.json")).unwrap();
    std::fs::write(a.root.join("gm/x.json/y"), "two\n").unwrap();
    std::fs::write(a.root.join("gm/other.md"), "keep\n").unwrap();
    std::fs::remove_file(a.root.join("gm/decisions.md")).unwrap();
    let r = sync(a, &["push", "--json"]).ok().json();
    let skipped: Vec<&str> = r["skipped"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(skipped.len(), 2, "{r}");
    assert!(skipped.iter().any(|s| s.starts_with(&long) && s.contains("cannot store")), "{skipped:?}");
    assert!(skipped.iter().any(|s| s.starts_with("gm/x")), "{skipped:?}");
    sync(b, &["pull"]).ok();
    assert_eq!(std::fs::read_to_string(b.root.join("gm/other.md")).unwrap(), "keep\n");
    assert!(!b.root.join("gm/decisions.md").exists(), "the delete went out");
    // No object is left without its metadata.
    let objects = bucket.objects();
    assert!(objects.keys().all(|k| !k.contains("xxxx")), "{:?}", objects.keys());
    // Gone, the files stop being tried.
    std::fs::remove_file(a.root.join(&long)).unwrap();
    std::fs::remove_dir_all(a.root.join("gm/x.json")).unwrap();
    std::fs::remove_file(a.root.join("gm/x")).unwrap();
    let r = sync(a, &["push", "--json"]).ok().json();
    assert!(r.get("skipped").is_none(), "{r}");
    sync(a, &["verify"]).ok();
}

/// A configured bucket directory that is gone (a share not mounted) is an error
/// naming sync.dir, not a new, empty bucket a reconcile would delete files against.
#[test]
fn a_missing_bucket_directory_is_refused_and_not_made() {
    let (_s, bucket, c) = by_hand();
    let a = &c.node("node-a").t;
    sync(a, &["push"]).ok();
    let at = std::path::PathBuf::from(&bucket.at);
    let away = at.with_extension("unmounted");
    std::fs::rename(&at, &away).unwrap();
    std::fs::write(a.root.join("gm/new.md"), "x\n").unwrap();
    let before = tree_hashes(&a.root);
    for args in [&["push"][..], &["pull"], &["verify"], &["full"]] {
        let r = sync(a, args);
        assert_eq!(r.code, 1, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("does not exist (sync.dir)"), "{args:?}: {}", r.stderr);
        assert!(!at.exists(), "{args:?}: no bucket was made");
    }
    assert_eq!(tree_hashes(&a.root), before, "the tree is as it was");
    std::fs::rename(&away, &at).unwrap();
    sync(a, &["push"]).ok();
    sync(a, &["verify"]).ok();
}

/// A bucket one may only read (mounted read-only) can still be read: verify takes
/// its per-key locks shared on files opened for reading.
#[test]
fn a_read_only_bucket_can_be_verified() {
    let (_s, bucket, c) = by_hand();
    let a = &c.node("node-a").t;
    sync(a, &["push"]).ok();
    let at = bucket.at.clone();
    let mount = |args: &[&str]| {
        let s = std::process::Command::new("mount").args(args).status().unwrap();
        assert!(s.success(), "mount {args:?} (the tests run as root)");
    };
    mount(&["--bind", &at, &at]);
    mount(&["-o", "remount,ro,bind", &at]);
    let r = sync(a, &["verify"]);
    let unmounted = std::process::Command::new("umount").arg(&at).status().unwrap();
    assert!(unmounted.success());
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}
