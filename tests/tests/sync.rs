//! Push, end to end: the real binary against the local-directory backend and real
//! S3-compatible servers (moto, s3s-fs), through edits, deletes, renames, large,
//! empty and non-ASCII files, server outages, daemon crashes and bad credentials.

use std::collections::BTreeMap;
use std::path::Path;

use clawboard_tests::s3::{Bucket, Kind, Server};
use clawboard_tests::{Run, Tree, sh_config, wait_until};
use rstest::rstest;

fn sync(t: &Tree, args: &[&str]) -> Run {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut all = vec!["--config", cfg.to_str().unwrap(), "sync"];
    all.extend_from_slice(args);
    t.run(&all)
}

/// Every file of the tree (`.clawboard/` aside) with its BLAKE3 hash.
fn tree_hashes(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            // Node-local by design: the folded heartbeats and this node's running instances.
            if rel == ".clawboard"
                || rel.starts_with("scratch")
                || rel == "shared/node-status.json"
                || rel == "roles/active.json"
            {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, blake3::hash(&std::fs::read(&p).unwrap()).to_hex().to_string());
            }
        }
    }
    out
}

/// `sync verify` finds no difference, and every object carries its file's hash.
fn assert_identical(t: &Tree, bucket: &Bucket, when: &str) {
    let v = sync(t, &["verify", "--json"]);
    assert_eq!(v.code, 0, "{when}: verify failed:\n{}{}", v.stdout, v.stderr);
    let report = v.json();
    for k in ["missing", "extra", "different"] {
        assert_eq!(report[k].as_array().unwrap().len(), 0, "{when}: {k}: {report}");
    }
    let local = tree_hashes(&t.root);
    let remote: BTreeMap<String, String> = bucket
        .objects()
        .into_iter()
        .map(|(k, h)| (k.clone(), h.unwrap_or_else(|| panic!("{k} has no hash"))))
        .collect();
    assert_eq!(remote, local, "{when}: bucket objects and their metadata hashes");
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// A small blackboard: tasks of eight files, harvests, reports.
fn fill(root: &Path, tasks: usize) {
    for i in 0..tasks {
        let id = format!("task-20261122-0000{i:02}-abcdef");
        for f in [
            "task.json",
            "team-composition.json",
            "result.json",
            "validation.json",
            "memory-harvest.json",
            "status.md",
            "attempts/0001-pm.json",
            "attempts/0001-pm.stdout",
        ] {
            // task.json is a finished task (the daemon's intake leaves it alone).
            let body = if f == "task.json" {
                format!(
                    r#"{{"taskId": "{id}", "type": "coding", "description": "d", "createdAt": "2026-11-22T00:00:00Z", "createdBy": "human", "priority": "normal", "status": "completed"}}"#
                )
            } else {
                format!("{{\"task\": \"{id}\", \"file\": \"{f}\"}}\n")
            };
            write(root, &format!("tasks/{id}/{f}"), body.as_bytes());
        }
    }
    write(root, "harvest/daily/2026-11-21.json", b"{\"date\": \"2026-11-21\"}\n");
    write(root, "reports/weekly/2026-W47.md", b"# week 47\n");
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::moto(Kind::Moto)]
#[case::s3s(Kind::S3s)]
fn the_bucket_stays_identical_through_edits_deletes_renames_and_odd_files(#[case] kind: Kind) {
    let t = Tree::init();
    let bucket = Bucket::new(kind, t.dir.path());
    t.config(&bucket.sync_config(t.dir.path(), "exclude = [\"scratch/**\"]"));
    fill(&t.root, 5);
    write(&t.root, "scratch/never-pushed.txt", b"local only");
    let r = sync(&t, &["push"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("uploaded"), "{}", r.stdout);
    assert_identical(&t, &bucket, "fresh tree");

    // Nothing changed: nothing sent.
    let r = sync(&t, &["push", "--json"]);
    assert_eq!(r.json()["uploaded"], 0, "{}", r.stdout);

    let first = "tasks/task-20261122-000000-abcdef";
    write(&t.root, &format!("{first}/result.json"), b"{\"summary\": \"better\"}\n");
    write(&t.root, &format!("{first}/status.md"), b"# done\n");
    sync(&t, &["push"]).ok();
    assert_identical(&t, &bucket, "edits");

    std::fs::remove_file(t.root.join(format!("{first}/attempts/0001-pm.stdout"))).unwrap();
    std::fs::remove_file(t.root.join("reports/weekly/2026-W47.md")).unwrap();
    let r = sync(&t, &["push", "--json"]);
    assert_eq!(r.json()["deleted"], 2, "{}", r.stdout);
    assert_identical(&t, &bucket, "deletes");

    std::fs::rename(t.root.join("tasks/task-20261122-000001-abcdef"), t.root.join("tasks/task-renamed")).unwrap();
    sync(&t, &["push"]).ok();
    assert_identical(&t, &bucket, "a renamed task directory");

    // 50 MiB goes up in parts; an empty file; names that are not ASCII.
    let big: Vec<u8> = (0..50u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    write(&t.root, "tasks/task-renamed/artifact.bin", &big);
    write(&t.root, "gm/empty.md", b"");
    write(&t.root, "harvest/daily/笔记 ü.json", "{\"内容\": \"记忆\"}".as_bytes());
    let r = sync(&t, &["push", "--json"]);
    assert_eq!(r.json()["uploaded"], 3, "{}", r.stdout);
    assert_identical(&t, &bucket, "large, empty and non-ASCII files");

    // The same content written again (new mtime) is hashed, not sent.
    write(&t.root, "gm/empty.md", b"");
    let r = sync(&t, &["push", "--json"]);
    assert_eq!((r.json()["uploaded"].as_u64(), r.json()["unchanged"].as_u64()), (Some(0), Some(1)), "{}", r.stdout);
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::moto(Kind::Moto)]
fn verify_reports_and_fixes_every_kind_of_difference(#[case] kind: Kind) {
    let t = Tree::init();
    let bucket = Bucket::new(kind, t.dir.path());
    t.config(&bucket.sync_config(t.dir.path(), ""));
    fill(&t.root, 2);
    sync(&t, &["push"]).ok();
    // Behind push's back: an object removed, one changed, one added.
    let r = bucket.remote();
    clawboard_tests::s3::runtime().block_on(async {
        use clawboard_sync::{Body, Condition, Metadata, Remote};
        r.delete("gm/decisions.md").await.unwrap();
        r.put("shared/risk-limits.json", Body::Bytes(b"{}".to_vec().into()), &Metadata::new(), &Condition::None)
            .await
            .unwrap();
        r.put("tasks/stray.txt", Body::Bytes(b"x".to_vec().into()), &Metadata::new(), &Condition::None).await.unwrap();
    });
    let v = sync(&t, &["verify", "--json"]);
    assert_eq!(v.code, 1, "differences give exit code 1");
    let j = v.json();
    assert_eq!(j["missing"], serde_json::json!(["gm/decisions.md"]));
    assert_eq!(j["extra"], serde_json::json!(["tasks/stray.txt"]));
    assert_eq!(j["different"], serde_json::json!(["shared/risk-limits.json"]));
    let f = sync(&t, &["verify", "--fix"]);
    assert_eq!(f.code, 0, "{}{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("fixed 3"), "{}", f.stdout);
    assert_identical(&t, &bucket, "after --fix");
}

#[test]
fn wrong_credentials_give_one_clear_error_and_keep_the_changes_pending() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::S3s, t.dir.path());
    let wrong = Bucket { secret: "not-the-secret".into(), ..bucket.clone() };
    t.config(&wrong.sync_config(t.dir.path(), ""));
    fill(&t.root, 3);
    let r = sync(&t, &["push"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let errors: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error, not one per file:\n{}", r.stderr);
    assert!(errors[0].contains("403") && errors[0].contains("check the credentials"), "{}", errors[0]);
    assert!(errors[0].contains(&format!("s3://{}/", bucket.name)), "names the remote: {}", errors[0]);
    assert!(!r.stderr.contains("not-the-secret"), "never prints the secret");
    let st = sync(&t, &["status", "--json"]).json();
    assert!(st["pending"]["entries"].as_u64().unwrap() > 0, "{st}");
    assert!(st["lastError"].as_str().unwrap().contains("403"), "{st}");
    assert!(bucket.objects().is_empty());

    t.config(&bucket.sync_config(t.dir.path(), ""));
    sync(&t, &["push"]).ok();
    assert_identical(&t, &bucket, "after the credentials were fixed");
    let st = sync(&t, &["status", "--json"]).json();
    assert_eq!(st["pending"]["entries"], 0, "{st}");
    assert!(st["lastError"].is_null(), "{st}");
}

#[test]
fn bad_sync_config_is_refused_naming_the_key() {
    let t = Tree::init();
    let creds = t.dir.path().join("open.env");
    std::fs::write(&creds, "AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).unwrap();
    t.config(&format!(
        "[sync.s3]\nbucket = \"b\"\nendpoint = \"http://127.0.0.1:9\"\ncredentials_file = {:?}\n",
        creds.display().to_string()
    ));
    let r = sync(&t, &["push"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("sync.s3.credentials_file") && r.stderr.contains("chmod 600"), "{}", r.stderr);

    t.config("[sync]\nschedule = \"every five minutes\"\n");
    let r = sync(&t, &["push"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("key sync.schedule"), "{}", r.stderr);
    for (bad, key, why) in [
        ("lease = \"10s\"\nheartbeat = \"30s\"", "sync.lease", "less than twice sync.heartbeat"),
        ("heartbeat = \"0s\"", "sync.heartbeat", "less than 1s"),
        ("heartbeat = \"1ms\"", "sync.heartbeat", "1ms is less than 1s"),
        // Twice this overflowed a Duration: a panic before.
        ("heartbeat = \"18446744073709551615s\"", "sync.heartbeat", "more than a day"),
        ("retry_base = \"10m\"\nretry_max = \"1s\"", "sync.retry_base", "more than sync.retry_max"),
        ("dir = \"\"", "sync.dir", "is empty"),
        ("dir = \"shared/bucket\"", "sync.dir", "is inside the tree"),
        ("dir = \"gm/../shared/./b\"", "sync.dir", "is inside the tree"),
        ("dir = \".\"", "sync.dir", "is inside the tree"),
        ("dir = \"..\"", "sync.dir", "holds the tree"),
        ("heartbeat = \"soon\"", "sync.heartbeat", "not a duration"),
        ("mass_delete_ratio = 1.5", "sync.mass_delete_ratio", "not within (0, 1]"),
        ("mass_delete_ratio = 0.0", "sync.mass_delete_ratio", "not within (0, 1]"),
        ("max_conflict_copies = 0", "sync.max_conflict_copies", "out of range"),
        ("log_retention = \"7\"", "sync.log_retention", "no unit"),
        ("pull = \"yes\"", "pull", "invalid type"),
        ("push_each_step = \"yes\"", "push_each_step", "invalid type"),
        ("exclude = [\"ok/**\", \"[unclosed\"]", "sync.exclude[1]", "\"[unclosed\": "),
    ] {
        t.config(&format!("[sync]\n{bad}\n"));
        for args in [&["pull"][..], &["push"][..]] {
            let r = sync(&t, args);
            assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
            assert!(r.stderr.contains(key) && r.stderr.contains(why), "{bad}: {}", r.stderr);
        }
    }
    assert!(!t.root.join(".clawboard/sync/pushed.log").exists(), "nothing was pushed or recorded");
    assert!(!t.root.join(".clawboard/sync/pull.json").exists(), "nothing was pulled");
}

/// The daemon with sync on a private server, pushing every second.
fn daemon_config(t: &Tree, bucket: &Bucket, extra: &str) {
    let sync_cfg = bucket
        .sync_config(t.dir.path(), &format!("schedule = \"* * * * * *\"\nretry_base = \"50ms\"\nretries = 2\n{extra}"));
    t.config(&format!("{}\n{sync_cfg}", sh_config("")));
}

#[test]
fn the_daemon_pushes_at_once_when_a_task_ends() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::Moto, t.dir.path());
    // The schedule never fires during the test: only the start and task ends push.
    let sync_cfg = bucket.sync_config(t.dir.path(), "schedule = \"0 0 0 1 1 *\"");
    t.config(&format!("{}\n{sync_cfg}", sh_config("")));
    let d = t.daemon();
    t.drop_task("t.json", r#"{"title": "push me", "description": "x", "type": "coding"}"#);
    let mut id = String::new();
    wait_until(20, "the task to complete", || {
        let list = t.run(&["task", "list", "--json"]).json();
        match list.as_array().and_then(|a| a.first()) {
            Some(task) if task["status"] == "completed" => {
                id = task["taskId"].as_str().unwrap().to_owned();
                true
            }
            _ => false,
        }
    });
    wait_until(15, "the finished task in the bucket", || {
        bucket.objects().contains_key(&format!("tasks/{id}/status.md")) && sync(&t, &["verify"]).code == 0
    });
    assert_identical(&t, &bucket, "after the task ended");
    assert_eq!(d.stop(), 0);
}

#[test]
fn the_daemon_reads_the_credentials_file_at_each_request_so_a_rotated_key_needs_no_restart() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::S3s, t.dir.path());
    daemon_config(&t, &bucket, "");
    fill(&t.root, 2);
    let d = t.daemon();
    let status = || sync(&t, &["status", "--json"]).json();
    wait_until(20, "the first push", || status()["pending"]["entries"] == 0);
    // The file's key changes under the running daemon (same path): its next push is refused.
    let wrong = Bucket { secret: "not-the-secret".into(), ..bucket.clone() };
    wrong.sync_config(t.dir.path(), "");
    write(&t.root, "gm/decisions.md", b"# written while the key is wrong\n");
    wait_until(20, "a push refused with the wrong key", || {
        status()["lastError"].as_str().is_some_and(|e| e.contains("403"))
    });
    assert!(!bucket.objects().contains_key("gm/decisions.md") || sync(&t, &["verify"]).code != 0);
    // The right key again, still without a restart: the change lands.
    bucket.sync_config(t.dir.path(), "");
    wait_until(20, "the change pushed with the rotated key", || {
        status()["pending"]["entries"] == 0 && sync(&t, &["verify"]).code == 0
    });
    assert_identical(&t, &bucket, "after the key was put right");
    assert!(!d.output().contains("not-the-secret"), "never logs the secret");
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_idle_tick_sends_no_put_and_never_lists_the_bucket() {
    let t = Tree::init();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Kind::Moto, dir.path());
    let bucket = server.bucket();
    // Heartbeats every 30 s (the default) fall outside the idle window below.
    daemon_config(&t, &bucket, "");
    fill(&t.root, 2);
    let d = t.daemon();
    wait_until(20, "the first push", || sync(&t, &["status", "--json"]).json()["pending"]["entries"] == 0);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let log = || std::fs::read_to_string(&server.log).unwrap();
    let before = log().lines().count();
    std::thread::sleep(std::time::Duration::from_secs(3));
    let idle: Vec<String> = log().lines().skip(before).map(str::to_owned).collect();
    // Each tick pulls: one listing of `_nodes/` (and of each other node's log); nothing else.
    let unexpected: Vec<&String> = idle
        .iter()
        .filter(|l| l.contains("\"PUT ") && !l.contains("/_nodes/") || l.contains("\"DELETE "))
        .chain(
            idle.iter()
                .filter(|l| l.contains("list-type=2") && !l.contains("prefix=_nodes") && !l.contains("prefix=_log")),
        )
        .collect();
    assert!(unexpected.is_empty(), "idle ticks sent: {unexpected:#?}");
    assert!(idle.len() <= 12, "three idle ticks sent {} requests: {idle:#?}", idle.len());
    // …and one change makes exactly one PUT of the file.
    let file_puts = || log().lines().filter(|l| l.contains(&format!("\"PUT /{}/gm/decisions.md", bucket.name))).count();
    let before = file_puts();
    write(&t.root, "gm/decisions.md", b"# one more\n");
    wait_until(10, "the change to be pushed", || file_puts() > before);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(file_puts(), before + 1, "one PUT of the changed file");
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_outage_mid_push_loses_nothing_and_sends_nothing_twice() {
    let t = Tree::init();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(Kind::S3s, dir.path());
    let bucket = server.bucket();
    daemon_config(&t, &bucket, "concurrency = 4");
    let d = t.daemon();
    fill(&t.root, 40);
    // Down while the push of 320 files is under way.
    wait_until(20, "the push to start", || {
        t.root.join(".clawboard/sync/pushed.log").metadata().is_ok_and(|m| m.len() > 0)
    });
    let outage = std::time::Instant::now();
    server.stop();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let st = sync(&t, &["status", "--json"]).json();
    assert!(st["pending"]["entries"].as_u64().unwrap() > 0, "the outage left changes pending: {st}");
    server.restart();
    let outage = outage.elapsed();
    wait_until(60, "the push to finish after the outage", || {
        sync(&t, &["status", "--json"]).json()["pending"]["entries"] == 0
    });
    let v = sync(&t, &["verify", "--json"]).json();
    if let Some(p) = v["missing"].as_array().unwrap().iter().chain(v["different"].as_array().unwrap()).next() {
        let p = p.as_str().unwrap();
        let grep = |f: &Path| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            text.lines().filter(|l| l.contains(p)).map(str::to_owned).collect::<Vec<_>>()
        };
        let journal: Vec<String> = std::fs::read_dir(t.root.join(".clawboard/journal"))
            .unwrap()
            .flatten()
            .flat_map(|e| grep(&e.path()))
            .collect();
        panic!(
            "{p} not in the bucket after the outage\npush log: {:#?}\njournal: {journal:#?}\nin the server's data dir: {}\ndaemon:\n{}\nserver log tail: {}",
            grep(&t.root.join(".clawboard/sync/pushed.log")),
            server.data.join(&bucket.name).join(p).exists(),
            d.output(),
            std::fs::read_to_string(&server.log)
                .unwrap_or_default()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    assert_identical(&t, &bucket, "after the outage");
    let st = sync(&t, &["status", "--json"]).json();
    let files = tree_hashes(&t.root).len() as u64;
    assert_eq!(st["thisProcess"]["uploaded"].as_u64(), Some(files), "each file uploaded exactly once: {st}");
    // One report per push run that failed: the one under way, then one per
    // second of the schedule while the server was down (and one tick of slack).
    // Once per retry (`retries = 2`) would be three per run.
    let failures = d.output().matches("sync: push failed").count();
    let runs = usize::try_from(outage.as_secs()).unwrap() + 3;
    assert!(
        (1..=runs).contains(&failures),
        "the outage ({outage:?}) is reported once per push run (at most {runs}), not once per retry ({failures}):\n{}",
        d.output()
    );
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_daemon_killed_mid_push_resumes_without_resending() {
    let t = Tree::init();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Kind::Moto, dir.path());
    let bucket = server.bucket();
    daemon_config(&t, &bucket, "concurrency = 2");
    fill(&t.root, 100);
    let d = t.daemon();
    let log = t.root.join(".clawboard/sync/pushed.log");
    wait_until(30, "part of the push", || std::fs::read_to_string(&log).is_ok_and(|s| s.lines().count() >= 150));
    d.crash();
    let landed_before = server.object_puts(&bucket.name);
    let files = tree_hashes(&t.root).len();
    assert!(landed_before < files, "the crash came after the push finished; make the tree larger");
    let d = t.daemon();
    wait_until(60, "the push to finish after the crash", || {
        sync(&t, &["status", "--json"]).json()["pending"]["entries"] == 0
    });
    assert_identical(&t, &bucket, "after the crash");
    let object_puts = format!("PUT /{}/", bucket.name);
    let puts = server.object_puts(&bucket.name);
    // Uploads in flight at the kill (at most `concurrency`) may go again; nothing else.
    assert!(puts >= files && puts <= files + 2, "{puts} PUTs for {files} files: {:#?}", server.repeated(&object_puts));
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_interrupted_full_push_resumes_where_it_stopped() {
    let t = Tree::init();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Kind::Moto, dir.path());
    let bucket = server.bucket();
    t.config(&bucket.sync_config(t.dir.path(), "concurrency = 2"));
    fill(&t.root, 100);
    let cfg = t.dir.path().join("clawboard.toml");
    let mut full = t
        .command(&["--config", cfg.to_str().unwrap(), "sync", "full"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = t.root.join(".clawboard/sync/pushed.log");
    wait_until(30, "part of the full push", || std::fs::read_to_string(&log).is_ok_and(|s| s.lines().count() >= 150));
    full.kill().unwrap();
    full.wait().unwrap();
    let files = tree_hashes(&t.root).len();
    let object_puts = format!("PUT /{}/", bucket.name);
    assert!(server.object_puts(&bucket.name) < files, "the kill came after the push finished; make the tree larger");
    let r = sync(&t, &["full", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.json()["unchanged"].as_u64().unwrap() >= 150, "what landed is skipped: {}", r.stdout);
    assert_identical(&t, &bucket, "after the interrupted full push");
    let puts = server.object_puts(&bucket.name);
    assert!(puts >= files && puts <= files + 2, "{puts} PUTs for {files} files: {:#?}", server.repeated(&object_puts));
}

/// A node's first pull lists the bucket, for what no change log covers. What this
/// node pushed itself is not downloaded again: not on moto, whose listings carry
/// ETags, and not on s3s-fs, whose listings carry none (one HEAD per object at most).
#[rstest]
#[case::moto(Kind::Moto)]
#[case::s3s(Kind::S3s)]
fn a_first_pull_after_sync_full_downloads_nothing_this_node_pushed(#[case] kind: Kind) {
    let t = Tree::init();
    let bucket = Bucket::new(kind, t.dir.path());
    let sync_cfg = bucket.sync_config(t.dir.path(), "schedule = \"0 0 0 1 1 *\"");
    t.config(&format!("{}\n{sync_cfg}", sh_config("")));
    fill(&t.root, 40);
    let full = sync(&t, &["full", "--no-progress"]);
    assert_eq!(full.code, 0, "{}{}", full.stdout, full.stderr);
    let objects = bucket.objects().len() as u64;
    assert!(objects > 300, "{objects} objects");
    let d = t.daemon();
    let status = t.root.join(".clawboard/sync/status.json");
    let mut st = serde_json::Value::Null;
    wait_until(60, "the daemon's first pull", || {
        st = std::fs::read(&status).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        st["thisProcess"]["pid"] == d.child.id() && st["lastPullAt"].is_string()
    });
    assert_eq!(st["lastPull"]["full"], true, "the first pull reconciles by listing: {st}");
    assert_eq!(st["lastPull"]["applied"], 0, "{st}");
    let requests = &st["thisProcess"]["requests"];
    let log = std::fs::read_to_string(&d.log).unwrap_or_default();
    assert_eq!(requests["get"], 0, "no object this node pushed is downloaded: {requests}\n{log}");
    assert!(requests["head"].as_u64().unwrap() <= objects, "at most one HEAD per object: {requests}");
    assert_eq!(d.stop(), 0);
}

/// The push records are about one bucket: a config that names another one gets the
/// whole tree on its next push, not "all already there" (the old records are set aside).
#[test]
fn a_new_bucket_in_the_config_gets_the_whole_tree_on_the_next_push() {
    let t = Tree::init();
    let first = Bucket::new(Kind::Dir, t.dir.path());
    t.config(&first.sync_config(t.dir.path(), ""));
    fill(&t.root, 5);
    let full = sync(&t, &["full", "--no-progress"]);
    assert_eq!(full.code, 0, "{}{}", full.stdout, full.stderr);
    assert_identical(&t, &first, "after the first bucket's full push");

    let dir = tempfile::tempdir().unwrap();
    let second = Bucket::new(Kind::Dir, dir.path());
    t.config(&second.sync_config(t.dir.path(), ""));
    let push = sync(&t, &["push", "--json"]);
    assert_eq!(push.code, 0, "{}{}", push.stdout, push.stderr);
    assert_eq!(push.json()["full"], true, "the new bucket gets a full push: {}", push.stdout);
    assert_identical(&t, &second, "after switching buckets");
    let sync_dir = t.root.join(".clawboard/sync");
    assert!(sync_dir.join("replaced/pushed.json").exists() || sync_dir.join("replaced/pushed.log").exists());
    let again = sync(&t, &["push", "--json"]);
    assert_eq!(again.json()["full"], false, "one full push is enough: {}", again.stdout);
}
