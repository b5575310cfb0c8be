use super::*;
use crate::Client;
use crate::dir::DirRemote;
use crate::error::RemoteError;
use crate::remote::{Body, Condition, Metadata, Page, PutOutcome};
use crate::report::RequestCounts;
use crate::testing::{Flaky, node};

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
        let bucket = d.path().join("bucket");
        let (ra, rb) = (d.path().join("a"), d.path().join("b"));
        let a = node(DirRemote::open(&bucket).unwrap(), &ra, "a");
        let b = node(DirRemote::open(&bucket).unwrap(), &rb, "b");
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
