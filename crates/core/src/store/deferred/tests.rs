//! Tests of deferred writes: the queue, the writer thread, the log's replay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::wal::tests::log;
use super::wal::{encode, parse};
use super::*;

fn tree() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(dir.path()).unwrap();
    (dir, store)
}

fn rel(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

#[test]
fn a_record_reads_back_at_once_lists_and_lands_on_disk() {
    let (dir, store) = tree();
    let store = store.with_deferred_writes().unwrap();
    store.write_record(&rel("tasks/t1/attempts/0001-w.json"), b"{\"n\": 1}\n").unwrap();
    store.write_record(&rel("tasks/t1/attempts/0001-w.json"), b"{\"n\": 2}\n").unwrap();
    store.write_view(&rel("tasks/t1/status.md"), b"# t1\n").unwrap();
    // This store sees the newest content whether or not the file is written yet.
    assert_eq!(store.read_bytes(&rel("tasks/t1/attempts/0001-w.json")).unwrap(), b"{\"n\": 2}\n");
    assert!(store.exists(&rel("tasks/t1/status.md")));
    assert_eq!(store.list_names("tasks/t1/attempts").unwrap(), vec!["0001-w.json".to_owned()]);
    store.sync_records().unwrap();
    store.settle();
    let on_disk = dir.path().join("tasks/t1/attempts/0001-w.json");
    assert_eq!(std::fs::read(on_disk).unwrap(), b"{\"n\": 2}\n");
    assert_eq!(std::fs::read(dir.path().join("tasks/t1/status.md")).unwrap(), b"# t1\n");
    // The log holds the records (not the view) until a checkpoint empties it.
    let raw = std::fs::read(dir.path().join(layout::WAL)).unwrap();
    assert_eq!(raw.len(), 8 << 20, "kept preallocated");
    let before = parse(&raw);
    assert_eq!(before.list.len(), 2);
    store.checkpoint().unwrap();
    let raw = std::fs::read(dir.path().join(layout::WAL)).unwrap();
    let after = parse(&raw);
    assert_eq!(after.list.len(), 0);
    assert_eq!(after.epoch, before.epoch + 1);
}

#[test]
fn a_file_written_before_its_record_was_synced_has_the_record_in_the_log_file() {
    let (dir, store) = tree();
    let store = store.with_deferred_writes().unwrap();
    store.write_record(&rel("tasks/t1/attempts/0001-w.json"), b"running").unwrap();
    store.write_record(&rel("tasks/t1/attempts/0001-w.json"), b"ok").unwrap();
    // Appends are gathered in memory until a sync; the writer thread writes
    // the file without one, so it must put the records in the log first: a
    // process killed now would otherwise replay an older record over the file.
    store.settle();
    assert_eq!(std::fs::read(dir.path().join("tasks/t1/attempts/0001-w.json")).unwrap(), b"ok");
    let raw = std::fs::read(dir.path().join(layout::WAL)).unwrap();
    let logged: Vec<(String, Vec<u8>)> = parse(&raw).list.into_iter().map(|(p, b)| (p, b.unwrap().to_vec())).collect();
    assert_eq!(
        logged,
        vec![
            ("tasks/t1/attempts/0001-w.json".to_owned(), b"running".to_vec()),
            ("tasks/t1/attempts/0001-w.json".to_owned(), b"ok".to_vec()),
        ]
    );
}

#[test]
fn the_writer_starts_no_file_while_the_log_syncs_unless_hurried() {
    let (dir, store) = tree();
    let store = store.with_deferred_writes().unwrap();
    let d = store.deferred.as_ref().unwrap();
    let pause = Syncing::start(&d.shared);
    store.write_view(&rel("tasks/t1/status.md"), b"# t1\n").unwrap();
    std::thread::sleep(BATCH_DELAY * 5);
    assert!(!dir.path().join("tasks/t1/status.md").exists(), "written during a sync");
    drop(pause);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.path().join("tasks/t1/status.md").exists() {
        assert!(Instant::now() < deadline, "not written once the sync ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A caller waiting for the files is not held up by a sync.
    let _pause = Syncing::start(&d.shared);
    store.write_view(&rel("tasks/t1/status.md"), b"# t1 again\n").unwrap();
    store.settle();
    assert_eq!(std::fs::read(dir.path().join("tasks/t1/status.md")).unwrap(), b"# t1 again\n");
}

#[test]
fn a_plain_write_after_a_record_of_the_same_path_is_the_one_that_stays() {
    let (dir, store) = tree();
    let store = store.with_deferred_writes().unwrap();
    for i in 0..50 {
        let r = rel(&format!("tasks/t1/f{i}.json"));
        store.write_record(&r, b"old").unwrap();
        store.write_bytes(&r, b"new").unwrap();
    }
    store.settle();
    for i in 0..50 {
        assert_eq!(std::fs::read(dir.path().join(format!("tasks/t1/f{i}.json"))).unwrap(), b"new", "f{i}");
    }
}

#[test]
fn a_plain_change_after_a_record_is_what_a_replay_after_a_crash_leaves() {
    let (dir, store) = tree();
    let store = store.with_deferred_writes().unwrap();
    let read = |root: &std::path::Path, p: &str| std::fs::read(root.join(p)).ok();
    // A record, then a plain write, a removal, a rename away and a rename onto it.
    store.write_record(&rel("tasks/t1/task.json"), b"running").unwrap();
    store.write_bytes(&rel("tasks/t1/task.json"), b"completed").unwrap();
    store.write_record(&rel("tasks/t1/a.json"), b"a").unwrap();
    store.remove(&rel("tasks/t1/a.json")).unwrap();
    store.write_record(&rel("tasks/t1/b.json"), b"b").unwrap();
    store.rename(&rel("tasks/t1/b.json"), &rel("tasks/t1/b2.json")).unwrap();
    store.write_record(&rel("tasks/t1/c.json"), b"old c").unwrap();
    store.write_bytes(&rel("tasks/t1/new-c.json"), b"new c").unwrap();
    store.rename(&rel("tasks/t1/new-c.json"), &rel("tasks/t1/c.json")).unwrap();
    // Removed, then created anew.
    store.write_record(&rel("tasks/t1/d.json"), b"d1").unwrap();
    store.remove(&rel("tasks/t1/d.json")).unwrap();
    store.create_bytes(&rel("tasks/t1/d.json"), b"d2").unwrap();
    assert!(matches!(store.create_bytes(&rel("tasks/t1/d.json"), b"d3"), Err(Error::AlreadyExists { .. })));
    store.settle();
    let expect = [
        ("tasks/t1/task.json", Some(&b"completed"[..])),
        ("tasks/t1/a.json", None),
        ("tasks/t1/b.json", None),
        ("tasks/t1/b2.json", Some(b"b")),
        ("tasks/t1/c.json", Some(b"new c")),
        ("tasks/t1/d.json", Some(b"d2")),
    ];
    for (p, want) in expect {
        assert_eq!(read(dir.path(), p).as_deref(), want, "{p} as written");
    }
    let logged = parse(&std::fs::read(dir.path().join(layout::WAL)).unwrap()).list.len();
    assert!(logged >= 10, "{logged} records");
    // Killed now (no checkpoint empties the log): the next start replays every
    // record, and the tree must stay as the plain changes left it, where
    // before they were logged too a replay brought back `running`, the removed
    // files and the old `c.json`.
    drop(store);
    let (again, _) = Store::init(dir.path()).unwrap();
    let _again = again.with_deferred_writes().unwrap();
    for (p, want) in expect {
        assert_eq!(read(dir.path(), p).as_deref(), want, "{p} after the replay");
    }
}

#[test]
fn a_crash_before_the_files_were_written_is_replayed_at_the_next_start() {
    let (dir, store) = tree();
    // What a killed process leaves: synced records whose files were never written,
    // then half a record it was writing.
    let mut raw =
        log(7, &[("tasks/t1/board/history/0000000001.json", b"one"), ("tasks/t1/attempts/0001-w.json", b"running")]);
    raw.extend(encode(7, "tasks/t1/attempts/0001-w.json", b"ok"));
    raw.extend(&encode(7, "tasks/t1/attempts/0002-w.json", b"never synced")[..20]);
    std::fs::write(dir.path().join(layout::WAL), &raw).unwrap();

    let store = store.with_deferred_writes().unwrap();
    let read = |p: &str| std::fs::read(dir.path().join(p)).unwrap();
    assert_eq!(read("tasks/t1/board/history/0000000001.json"), b"one");
    assert_eq!(read("tasks/t1/attempts/0001-w.json"), b"ok", "the newest record of a path wins");
    assert!(!dir.path().join("tasks/t1/attempts/0002-w.json").exists(), "a torn record is not replayed");
    // The log starts a new epoch: the old records are void, never replayed twice.
    let wal = read(layout::WAL);
    let now = parse(&wal);
    assert_eq!((now.epoch, now.list.len()), (8, 0));
    drop(store);
    std::fs::write(dir.path().join("tasks/t1/attempts/0001-w.json"), b"changed since").unwrap();
    let (again, _) = Store::init(dir.path()).unwrap();
    let _again = again.with_deferred_writes().unwrap();
    assert_eq!(read("tasks/t1/attempts/0001-w.json"), b"changed since");
}

#[test]
fn a_daemon_without_deferred_writes_replays_a_crashed_runs_log_once() {
    let (dir, _store) = tree();
    std::fs::write(dir.path().join(layout::WAL), log(4, &[("tasks/t1/attempts/0001-w.json", b"ok")])).unwrap();
    assert_eq!(Store::replay_records(dir.path()).unwrap(), 1);
    assert_eq!(std::fs::read(dir.path().join("tasks/t1/attempts/0001-w.json")).unwrap(), b"ok");
    let raw = std::fs::read(dir.path().join(layout::WAL)).unwrap();
    let now = parse(&raw);
    assert_eq!((now.epoch, now.list.len()), (5, 0));
    // Written over since: a second start must not bring the record back.
    std::fs::write(dir.path().join("tasks/t1/attempts/0001-w.json"), b"newer").unwrap();
    assert_eq!(Store::replay_records(dir.path()).unwrap(), 0);
    assert_eq!(std::fs::read(dir.path().join("tasks/t1/attempts/0001-w.json")).unwrap(), b"newer");
    // No log at all: nothing to do.
    let (other, _) = tree();
    assert_eq!(Store::replay_records(other.path()).unwrap(), 0);
}

#[test]
fn a_log_naming_a_path_outside_the_tree_is_refused_and_changes_nothing() {
    let (dir, store) = tree();
    std::fs::write(dir.path().join(layout::WAL), log(1, &[("../escape.json", b"x")])).unwrap();
    let e = store.with_deferred_writes().unwrap_err();
    assert!(e.to_string().contains("escape.json"), "{e}");
    assert!(!dir.path().parent().unwrap().join("escape.json").exists());
}

/// A file the writer cannot write (here its directory is a file; a full disk in
/// life) is not waited for forever: `settle` returns, the content stays readable
/// through the store, and the write is tried again until it lands.
#[test]
fn a_write_that_fails_is_retried_and_never_waited_for_forever() {
    let (dir, store) = tree();
    let store = store.with_deferred_writes().unwrap();
    std::fs::create_dir_all(dir.path().join("tasks")).unwrap();
    std::fs::write(dir.path().join("tasks/t1"), b"in the way").unwrap();
    let path = rel("tasks/t1/attempts/0001-w.json");
    store.write_record(&path, b"ok").unwrap();
    let (done, waited) = std::sync::mpsc::channel();
    let settling = store.clone();
    // Its own thread: a settle that never returns must fail the test, not hang it.
    std::thread::spawn(move || {
        settling.settle();
        done.send(()).unwrap();
    });
    waited.recv_timeout(std::time::Duration::from_secs(10)).expect("settle returned");
    assert_eq!(store.read_bytes(&path).unwrap(), b"ok", "still readable from the log");
    assert!(store.checkpoint().is_err(), "a checkpoint keeps the log while a file is unwritten");
    // Room again: within a retry or two the file lands.
    std::fs::remove_file(dir.path().join("tasks/t1")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dir.path().join("tasks/t1/attempts/0001-w.json").exists() {
        assert!(std::time::Instant::now() < deadline, "the write was tried again");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(std::fs::read(dir.path().join("tasks/t1/attempts/0001-w.json")).unwrap(), b"ok");
    store.checkpoint().unwrap();
}

/// A tmpfs of `size` mounted on a new directory (the tests run as root), unmounted
/// when dropped: a disk too small for the log's preallocation.
struct TinyDisk(tempfile::TempDir);

impl TinyDisk {
    fn mount(size: &str) -> TinyDisk {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(mounted.success(), "mounting a tmpfs (the tests run as root)");
        TinyDisk(dir)
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0.path()).status();
    }
}

/// On a disk without room for the log's 8 MiB, a start fails; the log it created
/// is gone (the disk's room is back), and a log that was there before is kept, cut
/// back to its length.
#[test]
fn a_start_without_room_for_the_log_removes_the_log_it_created() {
    let disk = TinyDisk::mount("4m");
    let root = disk.0.path().join("tree");
    let (store, _) = Store::init(&root).unwrap();
    let wal = root.join(layout::WAL);
    assert!(!wal.exists());
    let err = store.clone().with_deferred_writes().unwrap_err();
    assert!(err.to_string().contains("wal.log"), "{err}");
    assert!(!wal.exists(), "the log this start created is removed");
    std::fs::write(root.join("big"), vec![1u8; 3 << 20]).unwrap();
    std::fs::remove_file(root.join("big")).unwrap();
    // A log from an earlier start (emptied, epoch 3) stays as it was.
    let mut earlier = log(3, &[]);
    earlier.resize(1 << 20, 0);
    std::fs::write(&wal, &earlier).unwrap();
    assert!(store.with_deferred_writes().is_err());
    let after = std::fs::read(&wal).unwrap();
    assert!(after == earlier, "kept, at its length ({} bytes, not {})", after.len(), earlier.len());
}
