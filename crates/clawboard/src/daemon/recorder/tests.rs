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
        watcher: notify::RecommendedWatcher::new(|_| {}, notify::Config::default()).unwrap(),
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
