//! Replacing an existing file when the writer process is killed between its temp
//! write and the rename: readers see the old file, whole; recovery removes the
//! temp; a later write gives the new file, whole. The writer is this test binary
//! run again as a child process, so the crash is a real SIGKILL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use clawboard_core::{RelPath, Store};

const CHILD_ROOT: &str = "CLAWBOARD_CRASH_TEST_ROOT";

/// Runs only as the child: writes the new content over `gm/decisions.md`.
#[test]
fn child_writer() {
    let Ok(root) = std::env::var(CHILD_ROOT) else {
        return;
    };
    let store = Store::open(std::path::Path::new(&root)).unwrap();
    let new = "new content\n".repeat(10_000);
    store.write_bytes(&RelPath::new("gm/decisions.md").unwrap(), new.as_bytes()).unwrap();
}

fn spawn_writer(root: &std::path::Path, fault: bool) -> std::process::Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_writer", "--nocapture", "--test-threads=1"]).env(CHILD_ROOT, root);
    if fault {
        c.env("CLAWBOARD_FAULT", "pause-before-rename");
    } else {
        c.env_remove("CLAWBOARD_FAULT");
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

#[test]
fn killed_writer_leaves_old_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(dir.path()).unwrap();
    let rel = RelPath::new("gm/decisions.md").unwrap();
    let old = std::fs::read(store.path(&rel)).unwrap();

    let mut child = spawn_writer(dir.path(), true);
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("paused before renaming") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "child ended without reaching the fault point");
    }
    child.kill().unwrap();
    child.wait().unwrap();

    assert_eq!(std::fs::read(store.path(&rel)).unwrap(), old, "the old file is not intact");
    let removed = store.recover().unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(removed[0].starts_with("gm/.decisions.md.clawboard-tmp."), "{removed:?}");

    let status = spawn_writer(dir.path(), false).wait().unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read(store.path(&rel)).unwrap(), "new content\n".repeat(10_000).into_bytes());
    assert!(store.recover().unwrap().is_empty());
}
