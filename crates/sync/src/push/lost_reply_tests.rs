//! A PUT that landed while its record did not: the reply lost, or the daemon
//! stopped or killed mid-request (`inflight`).
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;

use crate::Client;
use crate::remote::Remote;
use crate::testing::{Flaky, node, node_with, settings};

async fn object(c: &Client<impl Remote>, key: &str) -> Vec<u8> {
    c.push.sync().remote().get(key).await.unwrap().unwrap().0.to_vec()
}

/// A new file's first PUT lands but its reply is lost; the file changes before
/// the next push (as the daemon's last writes at a stop do). For each body kind
/// (bytes, and a file streamed past the multipart threshold), in a new process
/// (a new client on the same tree): the next push sends the file over this
/// node's own unrecorded version, and verify finds nothing different.
#[tokio::test]
async fn a_first_put_whose_reply_was_lost_is_taken_over_by_the_next_push() {
    let d = tempfile::tempdir().unwrap();
    let (bucket, root) = (d.path().join("bucket"), d.path().join("a"));
    // Past 64 bytes a file is streamed from disk, not read into memory.
    let streamed = crate::SyncSettings { multipart_threshold: 64, ..settings() };
    let (small, large) = ("gm/small.md", "gm/large.md");
    let flaky = Flaky::new(&bucket);
    flaky.lose_puts.store(true, Ordering::SeqCst);
    {
        let a = node_with(flaky.clone(), &root, "a", streamed.clone());
        std::fs::write(root.join(small), "v1\n").unwrap();
        std::fs::write(root.join(large), "v1 ".repeat(100)).unwrap();
        let err = a.push.full().await.unwrap_err();
        assert!(err.to_string().contains("the reply was lost"), "{err}");
        assert_eq!(object(&a, small).await, b"v1\n", "the PUT landed");
        assert!(a.push.sync().with_state(|s| Ok(s.get(small).is_none())).unwrap(), "and left no record");
    }
    flaky.lose_puts.store(false, Ordering::SeqCst);
    std::fs::write(root.join(small), "v2, written after the push read v1\n").unwrap();
    std::fs::write(root.join(large), "v2 ".repeat(100)).unwrap();
    let a = node_with(flaky, &root, "a", streamed);
    let r = a.push.full().await.unwrap();
    assert_eq!(r.deferred, 0, "this node's own version is not left to pull: {r:?}");
    assert_eq!(object(&a, small).await, b"v2, written after the push read v1\n");
    assert_eq!(object(&a, large).await, "v2 ".repeat(100).as_bytes());
    let v = crate::verify::verify(&a.push, false).await.unwrap();
    assert_eq!(v.differences(), 0, "{v:?}");
    assert_eq!(std::fs::read(root.join(".clawboard/sync/inflight.jsonl")).unwrap(), b"", "nothing left unrecorded");
}

/// The same, but the file is deleted before the next push: the object of the
/// lost PUT goes from the bucket too (left there, other nodes would take the
/// file for one that exists).
#[tokio::test]
async fn a_first_put_whose_reply_was_lost_is_deleted_with_the_file() {
    let d = tempfile::tempdir().unwrap();
    let (bucket, root) = (d.path().join("bucket"), d.path().join("a"));
    let gone = "gm/gone.md";
    let flaky = Flaky::new(&bucket);
    flaky.lose_puts.store(true, Ordering::SeqCst);
    {
        let a = node(flaky.clone(), &root, "a");
        std::fs::write(root.join(gone), "short-lived\n").unwrap();
        a.push.full().await.unwrap_err();
        assert_eq!(object(&a, gone).await, b"short-lived\n", "the PUT landed");
    }
    flaky.lose_puts.store(false, Ordering::SeqCst);
    std::fs::remove_file(root.join(gone)).unwrap();
    let a = node(flaky, &root, "a");
    let r = a.push.full().await.unwrap();
    assert!(r.deleted >= 1, "{r:?}");
    assert!(a.push.sync().remote().head(gone).await.unwrap().is_none(), "the object went with the file");
    let tombstone = a.push.sync().with_state(|s| Ok(s.get(gone).cloned())).unwrap().unwrap();
    assert!(tombstone.deleted, "{tombstone:?}");
    assert_eq!(crate::verify::verify(&a.push, false).await.unwrap().differences(), 0);
}

/// The version pushed over a taken-over one is newer than it: the clock on disk
/// may be older (the push that sent it failed before saving its clock), and the
/// file's new mtime may be old (a file restored from an archive).
#[tokio::test]
async fn the_version_pushed_over_a_lost_one_is_newer_than_it() {
    let d = tempfile::tempdir().unwrap();
    let (bucket, root) = (d.path().join("bucket"), d.path().join("a"));
    // Only this file: no other upload moves the clock meanwhile.
    let mut only = settings();
    only.exclude.extend(["gm/**", "roles/**", "shared/**"].map(String::from));
    let path = "reports/restored.md";
    let stamp = |info: crate::remote::ObjectInfo| -> u64 { info.metadata[crate::remote::META_HLC].parse().unwrap() };
    let flaky = Flaky::new(&bucket);
    flaky.lose_puts.store(true, Ordering::SeqCst);
    {
        let a = node_with(flaky.clone(), &root, "a", only.clone());
        std::fs::write(root.join(path), "v1\n").unwrap();
        a.push.full().await.unwrap_err();
    }
    flaky.lose_puts.store(false, Ordering::SeqCst);
    let lost = stamp(flaky.head(path).await.unwrap().unwrap());
    std::fs::write(root.join(path), "v2, restored\n").unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options().write(true).open(root.join(path)).unwrap().set_modified(old).unwrap();
    let a = node_with(flaky.clone(), &root, "a", only);
    a.push.full().await.unwrap();
    let pushed = stamp(flaky.head(path).await.unwrap().unwrap());
    assert!(pushed > lost, "the new version's stamp {pushed} is not above the lost one's {lost}");
    let record = a.push.sync().with_state(|s| Ok(s.get(path).cloned())).unwrap().unwrap();
    assert!(record.vv["a"] > lost, "{record:?}");
}

/// Only a version this tree sent is taken over. A node set up again with the
/// same id (a fresh tree, no record, no note of the PUT) leaves the bucket's
/// version to pull, as it leaves another node's.
#[tokio::test]
async fn the_same_node_id_on_a_fresh_tree_does_not_overwrite_the_bucket() {
    let d = tempfile::tempdir().unwrap();
    let bucket = d.path().join("bucket");
    let (old, fresh) = (d.path().join("old"), d.path().join("fresh"));
    let a = node(Flaky::new(&bucket), &old, "a");
    std::fs::write(old.join("gm/shared.md"), "the team's\n").unwrap();
    a.push.full().await.unwrap();
    let again = node(Flaky::new(&bucket), &fresh, "a");
    std::fs::write(fresh.join("gm/shared.md"), "a fresh default\n").unwrap();
    let r = again.push.full().await.unwrap();
    assert!(r.deferred >= 1, "{r:?}");
    assert_eq!(object(&again, "gm/shared.md").await, b"the team's\n");
}

/// A task's previous holder was killed right after a PUT in the task landed (no
/// record, no change-log entry: no pull will ever bring it). The node that took
/// the task over, driving it under its lease, pushes its own version of that
/// path over the object; without the takeover (another node's object in a task
/// this node did not take from it), the bucket's version is left to pull.
#[tokio::test]
async fn the_taker_replaces_a_version_its_previous_holder_left_unlogged() {
    for taken_from_a in [true, false] {
        let d = tempfile::tempdir().unwrap();
        let bucket = d.path().join("bucket");
        let (ra, rb) = (d.path().join("a"), d.path().join("b"));
        let path = "tasks/t1/result.json";
        let flaky = Flaky::new(&bucket);
        flaky.lose_puts.store(true, Ordering::SeqCst);
        {
            let a = node(flaky.clone(), &ra, "a");
            std::fs::create_dir_all(ra.join("tasks/t1")).unwrap();
            std::fs::write(ra.join(path), "a's, just before it died\n").unwrap();
            a.push.full().await.unwrap_err();
        }
        flaky.lose_puts.store(false, Ordering::SeqCst);
        let b = node(Flaky::new(&bucket), &rb, "b");
        let claim = crate::fence::ClaimDoc {
            task_id: "t1".into(),
            node: "b".into(),
            generation: 2,
            claimed_at: crate::report::now_text(),
            taken_from: taken_from_a.then(|| "a".into()),
            renewed_at: None,
        };
        let body = bytes::Bytes::from(serde_json::to_vec(&claim).unwrap());
        let meta = crate::remote::Metadata::new();
        flaky
            .put("_claims/t1", crate::remote::Body::Bytes(body), &meta, &crate::remote::Condition::None)
            .await
            .unwrap();
        crate::node::remember_generation(&rb, "t1", 2).unwrap();
        let lease = &b.push.sync().lease;
        lease.enforce();
        lease.landed(crate::lease::Moment::now());
        lease.confirm("t1", lease.epoch());
        std::fs::create_dir_all(rb.join("tasks/t1")).unwrap();
        std::fs::write(rb.join(path), "b's, the holder's\n").unwrap();
        let r = b.push.full().await.unwrap();
        if taken_from_a {
            assert_eq!(r.deferred, 0, "{r:?}");
            assert_eq!(object(&b, path).await, b"b's, the holder's\n");
            let record = b.push.sync().with_state(|s| Ok(s.get(path).cloned())).unwrap().unwrap();
            assert!(record.vv.contains_key("a") && record.vv.contains_key("b"), "both histories: {record:?}");
        } else {
            assert!(r.deferred >= 1, "{r:?}");
            assert_eq!(object(&b, path).await, b"a's, just before it died\n");
        }
    }
}

/// A node killed right after the PUT of a new file in a task landed (no record,
/// no change-log entry) comes back and finds the task taken over. Fencing keeps
/// that file's bytes under `.clawboard/fenced/`, and deletes the object (no one
/// else ever had it) with a logged delete instead of writing it back into the task.
#[tokio::test]
async fn fencing_deletes_this_nodes_unrecorded_upload_of_a_new_file() {
    let d = tempfile::tempdir().unwrap();
    let (bucket, root) = (d.path().join("bucket"), d.path().join("a"));
    let path = "tasks/t1/attempts/0003-validator.json";
    let flaky = Flaky::new(&bucket);
    flaky.lose_puts.store(true, Ordering::SeqCst);
    {
        let a = node(flaky.clone(), &root, "a");
        std::fs::create_dir_all(root.join("tasks/t1/attempts")).unwrap();
        std::fs::write(root.join(path), "{\"status\": \"running\"}\n").unwrap();
        a.push.full().await.unwrap_err();
        assert!(a.push.sync().remote().head(path).await.unwrap().is_some(), "the PUT landed");
    }
    flaky.lose_puts.store(false, Ordering::SeqCst);
    let a = node(flaky.clone(), &root, "a");
    a.cluster.fence("t1").await.unwrap();
    assert!(!root.join(path).exists(), "not written back into the task");
    assert_eq!(
        std::fs::read(root.join(".clawboard/fenced/t1/attempts/0003-validator.json")).unwrap(),
        b"{\"status\": \"running\"}\n"
    );
    assert!(flaky.head(path).await.unwrap().is_none(), "deleted in the bucket");
    let record = a.push.sync().with_state(|s| Ok(s.get(path).cloned())).unwrap().unwrap();
    assert!(record.deleted, "a logged delete: {record:?}");
}
