use super::*;
use crate::Client;
use crate::dir::DirRemote;
use crate::error::RemoteError;
use crate::remote::{Body, Condition, Metadata, Page, PutOutcome};
use crate::report::RequestCounts;
use crate::testing::{Flaky, node, node_with, settings};

/// Nodes "a" and "b", each on its own tree in `dir` (`dir/a`, `dir/b`), sharing the
/// local bucket `dir/bucket`; with their roots.
fn two_nodes(dir: &std::path::Path) -> (Client<DirRemote>, std::path::PathBuf, Client<DirRemote>, std::path::PathBuf) {
    let bucket = dir.join("bucket");
    let (ra, rb) = (dir.join("a"), dir.join("b"));
    let a = node(DirRemote::open(&bucket).unwrap(), &ra, "a");
    let b = node(DirRemote::open(&bucket).unwrap(), &rb, "b");
    (a, ra, b, rb)
}

/// The directory backend as a far server whose listings carry no ETag (as
/// s3s-fs's): every HEAD and GET takes 50 ms.
struct FarNoEtags(DirRemote);

impl Remote for FarNoEtags {
    fn describe(&self) -> String {
        self.0.describe()
    }
    async fn put(&self, k: &str, b: Body, m: &Metadata, c: &Condition) -> Result<PutOutcome, RemoteError> {
        self.0.put(k, b, m, c).await
    }
    async fn get(&self, k: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        self.0.get(k).await
    }
    async fn head(&self, k: &str) -> Result<Option<ObjectInfo>, RemoteError> {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        self.0.head(k).await
    }
    async fn list(&self, p: &str, a: Option<&str>, m: usize) -> Result<Page, RemoteError> {
        let mut page = self.0.list(p, a, m).await?;
        page.objects.iter_mut().for_each(|o| o.etag = None);
        Ok(page)
    }
    async fn delete(&self, k: &str) -> Result<(), RemoteError> {
        self.0.delete(k).await
    }
    async fn delete_many(&self, k: &[String]) -> Result<Vec<(String, RemoteError)>, RemoteError> {
        self.0.delete_many(k).await
    }
}

/// `node`'s first pull, with a push of one new file 100 ms into it: the pull's
/// report, whether the push finished first, and the requests of the pull and push.
async fn first_pull_with_a_push(node: &Client<FarNoEtags>, root: &Path) -> (PullReport, bool, RequestCounts) {
    let before = node.push.sync().counts.snapshot();
    let started = Instant::now();
    let pull = async {
        let r = node.pull.pull(false).await;
        (r, started.elapsed())
    };
    let push = async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        std::fs::write(root.join(format!("gm/new-{}.md", node.push.sync().node())), "written during the first pull\n")
            .unwrap();
        let r = node.push.full().await;
        (r, started.elapsed())
    };
    let ((pulled, pull_took), (pushed, push_took)) = tokio::join!(pull, push);
    assert!(pushed.unwrap().uploaded >= 1);
    let new = format!("gm/new-{}.md", node.push.sync().node());
    assert!(node.push.sync().remote().head(&new).await.unwrap().is_some(), "the push sent the new file");
    let after = node.push.sync().counts.snapshot();
    let sent = RequestCounts { get: after.get - before.get, head: after.head - before.head, ..after };
    eprintln!("pull {pull_took:?}, push {push_took:?}, {sent:?}");
    (pulled.unwrap(), push_took < pull_took, sent)
}

#[tokio::test]
async fn a_first_pull_heads_instead_of_downloading_and_lets_a_push_through() {
    let d = tempfile::tempdir().unwrap();
    let bucket = d.path().join("bucket");
    let (ra, rb) = (d.path().join("a"), d.path().join("b"));
    let a = node(FarNoEtags(DirRemote::open(&bucket).unwrap()), &ra, "a");
    for i in 0..600 {
        std::fs::write(ra.join(format!("gm/f{i:03}.md")), format!("{i}\n")).unwrap();
    }
    a.push.full().await.unwrap();
    let objects = crate::remote::list_all(a.push.sync().remote(), "").await.unwrap();
    let objects = objects.iter().filter(|o| !a.push.sync().is_excluded(&o.key)).count() as u64;
    // A's own first pull: one HEAD per object (its listing has no ETag), no GET;
    // 600 HEADs of 50 ms, 16 at a time, hold no lock.
    let (pulled, push_first, sent) = first_pull_with_a_push(&a, &ra).await;
    assert!(pulled.full && pulled.applied == 0 && pulled.deleted == 0, "{pulled:?}");
    assert!(push_first, "the push waited for the whole pull");
    assert_eq!(sent.get, 0, "nothing this node pushed is downloaded: {sent:?}");
    assert!(sent.head <= objects, "one HEAD per object at most ({objects}): {sent:?}");
    // B's first pull fetches everything (it holds no version), holding the lock
    // while it applies, and lets B's push through at the end of a slice.
    let b = node(FarNoEtags(DirRemote::open(&bucket).unwrap()), &rb, "b");
    let (pulled, push_first, sent) = first_pull_with_a_push(&b, &rb).await;
    assert!(pulled.applied >= 600, "{pulled:?}");
    assert!(push_first, "the push waited for the whole pull");
    assert!(sent.get >= 600, "{sent:?}");
    assert_eq!(std::fs::read_to_string(rb.join("gm/f599.md")).unwrap(), "599\n");
}

#[tokio::test]
async fn a_pull_that_fails_midway_applies_whole_segments_only_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let bucket = d.path().join("bucket");
    let (ra, rb) = (d.path().join("a"), d.path().join("b"));
    let a = node(DirRemote::open(&bucket).unwrap(), &ra, "a");
    let flaky = Flaky { key: "gm/two.md".into(), ..Flaky::new(&bucket) };
    let fail = flaky.fail.clone();
    let b = node(flaky, &rb, "b");
    // B's first pull (a listing of the still empty bucket) is behind it.
    b.pull.pull(false).await.unwrap();
    // Three pushes, three segments; the second's file cannot be fetched at first.
    for (i, name) in ["one", "two", "three"].iter().enumerate() {
        std::fs::write(ra.join(format!("gm/{name}.md")), format!("{i}\n")).unwrap();
        a.push.full().await.unwrap();
    }
    fail.store(true, Ordering::SeqCst);
    let err = b.pull.pull(false).await.unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(std::fs::read_to_string(rb.join("gm/one.md")).unwrap(), "0\n", "the first segment is applied");
    assert!(!rb.join("gm/two.md").exists() && !rb.join("gm/three.md").exists(), "nothing after the failure");
    let cursors: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rb.join(".clawboard/sync/pull.json")).unwrap()).unwrap();
    assert_eq!(cursors["nodes"]["a"].as_u64(), Some(1), "the cursor stops after the applied segment");
    let temps: Vec<_> = walkdir::WalkDir::new(rb.join("gm"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("clawboard-tmp"))
        .collect();
    assert!(temps.is_empty(), "no half-written file: {temps:?}");
    fail.store(false, Ordering::SeqCst);
    let r = b.pull.pull(false).await.unwrap();
    assert_eq!((r.segments, r.applied), (2, 2));
    for name in ["one", "two", "three"] {
        let p = format!("gm/{name}.md");
        assert_eq!(std::fs::read(ra.join(&p)).unwrap(), std::fs::read(rb.join(&p)).unwrap(), "{p}");
    }
    assert_eq!(b.pull.pull(false).await.unwrap().segments, 0, "nothing is applied twice");
}

/// Node-b's copy of a task file reaches the bucket first; node-a holds the task's
/// claim and made its own version: at node-a's pull, its version stays (and is
/// pushed), node-b's is kept as a copy. Without the claim, the bucket's would win.
#[tokio::test]
async fn in_a_task_directory_the_claim_holders_version_wins() {
    for holds_claim in [true, false] {
        let d = tempfile::tempdir().unwrap();
        let (a, ra, b, rb) = two_nodes(d.path());
        let path = "tasks/t1/task.json";
        for (root, text) in [(&rb, "pending on b\n"), (&ra, "completed on a\n")] {
            std::fs::create_dir_all(root.join("tasks/t1")).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        if holds_claim {
            crate::node::remember_generation(&ra, "t1", 1).unwrap();
        }
        b.push.full().await.unwrap();
        let pushed = a.push.full().await.unwrap();
        assert_eq!(pushed.deferred, 1, "the bucket has node-b's version: {pushed:?}");
        let r = a.pull.pull(false).await.unwrap();
        let here = std::fs::read_to_string(ra.join(path)).unwrap();
        let (object, _) = a.push.sync().remote().get(path).await.unwrap().unwrap();
        if holds_claim {
            assert_eq!(here, "completed on a\n", "{r:?}");
            assert_eq!(&object[..], b"completed on a\n", "pushed over node-b's");
            assert_eq!(r.conflicts[0].loser, "b", "{r:?}");
        } else {
            assert_eq!(here, "pending on b\n", "{r:?}");
        }
    }
}

/// The `escalations/*.json` files under `root`.
fn escalations(root: &Path) -> Vec<serde_json::Value> {
    std::fs::read_dir(root.join("escalations"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect()
}

/// When node-b learns it lost the task, in the order of
/// [`a_copy_of_the_losers_version_leaves_the_holders_task_directory`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Learns {
    /// Its claim check fences the task before the copy reaches it.
    FencedFirst,
    /// It never tried to claim the task: the copy of its own `task.json`, under
    /// node-a's claim in the bucket, tells it (its pull fences the task).
    FromTheCopy,
    /// The copy reached it before node-a's claim was in the bucket; its claim
    /// check fences the task afterwards.
    FencedAfter,
}

/// Node-b took in the same task and pushed its copy first; node-a holds the claim,
/// so node-a's pull keeps node-b's version beside its own as a conflict copy.
/// Once node-b knows it lost the task (three orders), it keeps the copy's bytes
/// under `.clawboard/fenced/t1/`, raises the one escalation, and withdraws the
/// copy: the bucket no longer has it and node-a's next pull removes it from the
/// task's directory. Node-a's version stays everywhere.
#[tokio::test]
async fn a_copy_of_the_losers_version_leaves_the_holders_task_directory() {
    use crate::cluster::ClaimResult;
    for learns in [Learns::FencedFirst, Learns::FromTheCopy, Learns::FencedAfter] {
        let d = tempfile::tempdir().unwrap();
        let (a, ra, b, rb) = two_nodes(d.path());
        let path = "tasks/t1/task.json";
        for (root, text) in [(&rb, "pending on b\n"), (&ra, "completed on a\n")] {
            std::fs::create_dir_all(root.join("tasks/t1")).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        b.push.full().await.unwrap();
        if learns == Learns::FencedAfter {
            crate::node::remember_generation(&ra, "t1", 1).unwrap();
        } else {
            assert_eq!(a.cluster.claim("t1").await.unwrap(), ClaimResult::Won { generation: 1 });
        }
        a.push.full().await.unwrap();
        let r = a.pull.pull(false).await.unwrap();
        let copy = r.conflicts[0].copy.clone().unwrap();
        assert!(copy.starts_with("tasks/t1/task.conflict-b-"), "{r:?}");
        assert_eq!(std::fs::read_to_string(ra.join(&copy)).unwrap(), "pending on b\n");
        let b_loses = async || {
            assert_eq!(b.cluster.claim("t1").await.unwrap(), ClaimResult::Lost { owner: "a".into() });
            b.cluster.fence("t1").await.unwrap();
        };
        if learns == Learns::FencedFirst {
            b_loses().await;
        }
        let r = b.pull.pull(false).await.unwrap();
        assert_eq!(r.conflicts.len(), 1, "{learns:?}: node-b is told: {r:?}");
        let told = if learns == Learns::FencedAfter { Some(copy.clone()) } else { crate::copy::kept_path(&copy) };
        assert_eq!(r.conflicts[0].copy, told, "{learns:?}: the pull says where node-b's version is now");
        if learns == Learns::FencedAfter {
            assert!(rb.join(&copy).exists(), "not claimed in the bucket yet: the copy stays");
            assert_eq!(a.cluster.claim("t1").await.unwrap(), ClaimResult::Won { generation: 1 });
            b_loses().await;
        }
        let kept = crate::copy::kept_path(&copy).unwrap();
        assert_eq!(std::fs::read_to_string(rb.join(&kept)).unwrap(), "pending on b\n", "{learns:?}: kept on b");
        assert!(crate::node::is_fenced(&rb, "t1"), "{learns:?}");
        assert!(!rb.join(&copy).exists(), "{learns:?}");
        assert_eq!(std::fs::read_to_string(rb.join(path)).unwrap(), "completed on a\n", "{learns:?}");
        assert!(a.push.sync().remote().get(&copy).await.unwrap().is_none(), "{learns:?}: deleted in the bucket");
        let raised = escalations(&rb);
        assert_eq!(raised.len(), 1, "{learns:?}: {raised:?}");
        let issue = raised[0]["issue"].as_str().unwrap();
        assert!(issue.contains(path), "{learns:?}: {issue}");
        if learns != Learns::FencedAfter {
            assert!(issue.contains(&kept), "{learns:?}: {issue}");
        }
        // Node-a takes the delete; nothing else changes in its task.
        a.pull.pull(false).await.unwrap();
        assert!(!ra.join(&copy).exists(), "{learns:?}: the copy left node-a's task directory");
        assert_eq!(std::fs::read_to_string(ra.join(path)).unwrap(), "completed on a\n", "{learns:?}");
        let left: Vec<String> = std::fs::read_dir(ra.join("tasks/t1"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["task.json"], "{learns:?}");
        // Pulled again, nothing comes back and nothing is raised twice.
        b.pull.pull(false).await.unwrap();
        a.pull.pull(false).await.unwrap();
        assert_eq!(escalations(&rb).len(), 1, "{learns:?}");
        assert!(!ra.join(&copy).exists() && !rb.join(&copy).exists(), "{learns:?}");
        assert_eq!(escalations(&ra), escalations(&rb), "{learns:?}: node-a has node-b's escalation");
    }
}

/// A person on node-b edits the task node-a holds (node-b never took it in), at
/// the same time as node-a: node-a's version stays, and the copy of the person's
/// version stays in the task's directory on both nodes (nothing withdrawn).
#[tokio::test]
async fn a_copy_of_a_persons_edit_on_another_node_stays_in_the_task() {
    let d = tempfile::tempdir().unwrap();
    let (a, ra, b, rb) = two_nodes(d.path());
    let path = "tasks/t1/task.json";
    std::fs::create_dir_all(ra.join("tasks/t1")).unwrap();
    std::fs::write(ra.join(path), "pending on a\n").unwrap();
    a.cluster.claim("t1").await.unwrap();
    a.push.full().await.unwrap();
    b.pull.pull(false).await.unwrap();
    std::fs::write(ra.join(path), "running on a\n").unwrap();
    std::fs::write(rb.join(path), "edited by a person on b\n").unwrap();
    b.push.full().await.unwrap();
    a.pull.pull(false).await.unwrap();
    a.push.full().await.unwrap();
    let r = b.pull.pull(false).await.unwrap();
    assert_eq!(r.conflicts.len(), 1, "{r:?}");
    let copy = r.conflicts[0].copy.clone().unwrap();
    assert_eq!(std::fs::read_to_string(rb.join(&copy)).unwrap(), "edited by a person on b\n");
    assert_eq!(std::fs::read_to_string(rb.join(path)).unwrap(), "running on a\n");
    assert!(!crate::node::is_fenced(&rb, "t1"));
    a.pull.pull(false).await.unwrap();
    assert_eq!(std::fs::read_to_string(ra.join(&copy)).unwrap(), "edited by a person on b\n", "kept in the task");
    assert!(a.push.sync().remote().get(&copy).await.unwrap().is_some());
}

/// Node-a holds the task and pushed its `task.json` first; node-b took the same
/// task in and finds the conflict itself (its push was deferred): node-a's
/// version is written, node-b's is kept under its fence marker, never as a copy
/// in the task's directory, and node-b raises the one escalation.
#[tokio::test]
async fn a_node_that_took_in_a_task_held_elsewhere_makes_no_copy_in_it() {
    let d = tempfile::tempdir().unwrap();
    let (a, ra, b, rb) = two_nodes(d.path());
    let path = "tasks/t1/task.json";
    for (root, text) in [(&ra, "completed on a\n"), (&rb, "pending on b\n")] {
        std::fs::create_dir_all(root.join("tasks/t1")).unwrap();
        std::fs::write(root.join(path), text).unwrap();
    }
    a.cluster.claim("t1").await.unwrap();
    a.push.full().await.unwrap();
    assert_eq!(b.push.full().await.unwrap().deferred, 1);
    let r = b.pull.pull(false).await.unwrap();
    assert_eq!(r.conflicts.len(), 1, "{r:?}");
    let copy = r.conflicts[0].copy.clone().unwrap();
    assert!(copy.starts_with("tasks/t1/task.conflict-b-"), "{r:?}");
    assert_eq!(std::fs::read_to_string(rb.join(path)).unwrap(), "completed on a\n");
    let kept = crate::copy::kept_path(&copy).unwrap();
    assert_eq!(std::fs::read_to_string(rb.join(&kept)).unwrap(), "pending on b\n");
    assert!(crate::node::is_fenced(&rb, "t1"));
    assert!(!rb.join(&copy).exists());
    assert!(a.push.sync().remote().get(&copy).await.unwrap().is_none(), "no copy in the bucket");
    let raised = escalations(&rb);
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert!(raised[0]["issue"].as_str().unwrap().contains(&kept), "{raised:?}");
    a.pull.pull(false).await.unwrap();
    let left: Vec<String> = std::fs::read_dir(ra.join("tasks/t1"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["task.json"]);
    assert_eq!(std::fs::read_to_string(ra.join(path)).unwrap(), "completed on a\n");
    assert_eq!(escalations(&ra), raised, "node-a has node-b's escalation");
    b.pull.pull(false).await.unwrap();
    assert_eq!(escalations(&rb).len(), 1, "nothing raised twice");
}

/// A GET that answers one version's metadata with another's bytes (a server that
/// reads an object beside its write, as s3s-fs may) is read again: the pull never
/// records the new version's history over the old bytes, which no later pull
/// would replace. Without retries the pull fails naming the path and records
/// nothing; the next pull takes the version.
#[tokio::test]
async fn a_read_torn_between_two_versions_is_read_again_and_never_recorded() {
    let d = tempfile::tempdir().unwrap();
    let (bucket, ra, rb) = (d.path().join("bucket"), d.path().join("a"), d.path().join("b"));
    let path = "gm/notes.md";
    let a = node(DirRemote::open(&bucket).unwrap(), &ra, "a");
    let flaky = Flaky { key: path.into(), ..Flaky::new(&bucket) };
    let recorded = |b: &Client<Flaky>| b.push.sync().with_state(|s| Ok(s.get(path).cloned())).unwrap().unwrap();
    let hash = |text: &str| blake3::hash(text.as_bytes()).to_hex().to_string();
    let push = |text: &'static str| {
        std::fs::write(ra.join(path), text).unwrap();
        a.push.full()
    };
    push("v1\n").await.unwrap();
    {
        let b = node(flaky.clone(), &rb, "b");
        b.pull.pull(false).await.unwrap();
        push("v2, longer\n").await.unwrap();
        *flaky.torn.lock().unwrap() = Some(Bytes::from_static(b"v1\n"));
        let err = b.pull.pull(false).await.unwrap_err().to_string();
        assert!(err.contains(path) && err.contains("written while read"), "{err}");
        assert_eq!(std::fs::read_to_string(rb.join(path)).unwrap(), "v1\n");
        assert_eq!(recorded(&b).hash, hash("v1\n"), "the torn read recorded nothing");
        b.pull.pull(false).await.unwrap();
        assert_eq!(std::fs::read_to_string(rb.join(path)).unwrap(), "v2, longer\n");
    }
    // With a retry, the pull reads it again and goes on.
    let b = node_with(flaky.clone(), &rb, "b", crate::SyncSettings { retries: 1, ..settings() });
    push("v3\n").await.unwrap();
    *flaky.torn.lock().unwrap() = Some(Bytes::from_static(b"v2, longer\n"));
    let r = b.pull.pull(false).await.unwrap();
    assert_eq!(r.applied, 1, "{r:?}");
    assert!(flaky.torn.lock().unwrap().is_none(), "the torn answer was given");
    assert_eq!(std::fs::read_to_string(rb.join(path)).unwrap(), "v3\n");
    let rec = recorded(&b);
    assert_eq!(
        (rec.hash, rec.vv),
        (hash("v3\n"), a.push.sync().with_state(|s| Ok(s.get(path).unwrap().vv.clone())).unwrap())
    );
}
