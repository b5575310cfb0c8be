//! The recorder thread fed by hand: rescans, its own writes, group commit.

use super::*;
use clawboard_core::journal::{ChangeKind, read_after};

fn state(root: &Path) -> (State, watch::Receiver<u64>) {
    let state_dir = root.join(".clawboard");
    let (tx, rx) = watch::channel(0);
    let state = State {
        root: root.to_owned(),
        journal: Journal::open(&state_dir.join("journal")).unwrap(),
        index: Index::default(),
        state_dir,
        expected: Arc::new(Lock::new(HashMap::new())),
        registry: Arc::new(Registry::default()),
        overflow: Arc::new(AtomicBool::new(false)),
        since_snapshot: 0,
        last_seq: tx,
        tasks: Arc::new(Lock::new(TaskSummary::default())),
        group_commit: GROUP_COMMIT,
        unsaved_since: None,
        snapshot_after: SNAPSHOT_AFTER,
        verifier: Verifier::new(VERIFY_EVERY, FIRST_VERIFY),
        watches: Watches::start(
            root,
            Box::new(|| notify::RecommendedWatcher::new(|_| {}, notify::Config::default())),
            HashSet::new(),
        )
        .unwrap(),
    };
    (state, rx)
}

#[test]
fn a_rescan_event_emits_what_the_events_missed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("inbox")).unwrap();
    let (state, last_seq) = state(root);
    // Files that appeared with no event (as when the kernel's queue overflowed).
    std::fs::write(root.join("inbox/a.json"), "{}").unwrap();
    std::fs::write(root.join("inbox/.a.json.swp"), "x").unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let rescan = notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
    tx.send(Msg::Fs(Ok(rescan))).unwrap();
    tx.send(Msg::Stop).unwrap();
    state.run(rx).unwrap();
    assert_eq!(*last_seq.borrow(), 1);
    let entries = read_after(&root.join(".clawboard/journal"), 0, 10).unwrap();
    let paths: Vec<_> = entries.iter().map(|e| (e.change.path.as_str(), e.change.kind)).collect();
    assert_eq!(paths, vec![("inbox/a.json", ChangeKind::Put)]);
    assert!(root.join(".clawboard/index.json").exists(), "the index is saved on stop");
}

#[test]
fn own_writes_are_journaled_once_with_their_origin() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (state, _) = state(root);
    let expected = state.expected.clone();
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let sink = Sink { tx: tx.clone(), expected };
    let (store, _) = clawboard_core::Store::init(root).unwrap();
    let store = store.with_sink(Arc::new(sink), Origin::Remote);
    store.write_bytes(&clawboard_core::RelPath::new("gm/note.md").unwrap(), b"hi").unwrap();
    // The watcher's event for the same write, arriving after the store's report.
    let close =
        notify::Event::new(EventKind::Access(AccessKind::Close(AccessMode::Write))).add_path(root.join("gm/note.md"));
    tx.send(Msg::Fs(Ok(close))).unwrap();
    tx.send(Msg::Stop).unwrap();
    state.run(rx).unwrap();
    let all = read_after(&root.join(".clawboard/journal"), 0, 100).unwrap();
    let notes: Vec<_> = all.iter().filter(|e| e.change.path == "gm/note.md").collect();
    assert_eq!(notes.len(), 1, "{all:?}");
    assert_eq!(notes[0].change.origin, Origin::Remote);
}

#[test]
fn changes_within_the_group_commit_window_are_journaled_together() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("gm")).unwrap();
    let (mut state, mut last_seq) = state(root);
    state.group_commit = std::time::Duration::from_millis(500);
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let thread = std::thread::spawn(move || state.run(rx));
    let own = |name: &str| {
        std::fs::write(root.join("gm").join(name), name).unwrap();
        tx.send(Msg::Own(format!("gm/{name}"), Origin::Local)).unwrap();
    };
    // After a quiet spell: journaled at once.
    own("a.md");
    let wait_for = |rx: &mut watch::Receiver<u64>, seq: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while *rx.borrow_and_update() < seq {
            assert!(std::time::Instant::now() < deadline, "seq {seq} never journaled");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    wait_for(&mut last_seq, 1);
    // Right after a commit: held until the window closes, with what comes meanwhile.
    own("b.md");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!last_seq.has_changed().unwrap(), "b.md was journaled alone, within the window");
    own("c.md");
    wait_for(&mut last_seq, 3);
    tx.send(Msg::Stop).unwrap();
    thread.join().unwrap().unwrap();
    let all = read_after(&root.join(".clawboard/journal"), 0, 100).unwrap();
    let paths: Vec<_> = all.iter().map(|e| e.change.path.as_str()).collect();
    assert_eq!(paths, vec!["gm/a.md", "gm/b.md", "gm/c.md"]);
}

#[test]
fn running_out_of_watches_says_which_sysctl_to_raise() {
    let msg = inotify_hint(&notify::Error::new(notify::ErrorKind::MaxFilesWatch));
    assert!(msg.contains("sysctl fs.inotify.max_user_watches="), "{msg}");
}

/// A finished task's directory, written an hour ago.
fn finished_task(root: &Path, id: &str) {
    let dir = root.join("tasks").join(id);
    std::fs::create_dir_all(dir.join("attempts")).unwrap();
    let task = serde_json::json!({"taskId": id, "type": "coding", "description": "d", "priority": "normal",
        "createdBy": "human", "createdAt": "2026-01-01T00:00:00Z", "status": "completed"});
    std::fs::write(dir.join("task.json"), task.to_string()).unwrap();
    std::fs::write(dir.join("attempts/0001-pm.json"), "{}").unwrap();
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for f in ["task.json", "attempts/0001-pm.json"] {
        std::fs::File::options().write(true).open(dir.join(f)).unwrap().set_modified(hour_ago).unwrap();
    }
}

/// The journal's paths and kinds after `seq`.
fn journaled_after(root: &Path, seq: u64) -> Vec<(String, ChangeKind)> {
    read_after(&root.join(".clawboard/journal"), seq, 1000)
        .unwrap()
        .into_iter()
        .map(|e| (e.change.path, e.change.kind))
        .collect()
}

#[test]
fn a_finished_tasks_quiet_directory_is_unwatched_and_what_changes_there_is_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    finished_task(root, "t1");
    finished_task(root, "t2");
    std::fs::create_dir_all(root.join("tasks/t3")).unwrap(); // running: no row, stays watched
    let (mut state, _) = state(root);
    state.index = Index::new(&state.state_dir);
    let found = state.scan_tree().unwrap();
    state.commit(found).unwrap();
    *state.tasks.lock() = TaskSummary::rebuild(root, state.journal.last_seq()).unwrap();
    state.snapshot(false).unwrap();
    let unwatched: std::collections::BTreeSet<&str> = state.watches.unwatched().iter().map(String::as_str).collect();
    assert_eq!(unwatched, ["tasks/t1", "tasks/t2"].into(), "frozen and finished");

    // Written by someone else where no watch sees it: the verifier's pass finds it.
    let seq = state.journal.last_seq();
    std::fs::write(root.join("tasks/t1/attempts/0002-worker.json"), "{}").unwrap();
    state.verify_due().unwrap();
    assert_eq!(journaled_after(root, seq), [("tasks/t1/attempts/0002-worker.json".to_owned(), ChangeKind::Put)]);
    assert!(!state.watches.is_unwatched("tasks/t1"), "thawed by the change: watched again");

    // The daemon's own write there thaws it too; a removal whole is every file's deletion.
    let seq = state.journal.last_seq();
    std::fs::remove_dir_all(root.join("tasks/t2")).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let removed =
        notify::Event::new(EventKind::Remove(notify::event::RemoveKind::Folder)).add_path(root.join("tasks/t2"));
    tx.send(Msg::Fs(Ok(removed))).unwrap();
    tx.send(Msg::Stop).unwrap();
    state.run(rx).unwrap();
    assert_eq!(
        journaled_after(root, seq),
        [
            ("tasks/t2/attempts/0001-pm.json".to_owned(), ChangeKind::Delete),
            ("tasks/t2/task.json".to_owned(), ChangeKind::Delete)
        ]
    );
}
