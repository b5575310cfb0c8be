//! Helpers shared by the board's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use clawboard_board::TaskBoard;
use clawboard_core::Store;
use clawboard_core::acl::Acl;
use clawboard_core::formats::BoardFile;

/// A fresh, initialized store in a temp dir (keep the dir alive as long as the store).
pub fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (store, _) = Store::init(dir.path()).expect("Store::init");
    (dir, store)
}

/// The seed's policy (the embedded config/acl.toml).
pub fn acl() -> Acl {
    Acl::seed().expect("the seed's acl.toml parses")
}

/// Every file under `tasks/{task}/`, by path relative to that directory, with its
/// bytes; directories are listed too (with no bytes), so an empty directory that
/// appears is a change.
pub fn tree(store: &Store, task: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    let root = store.root().join("tasks").join(task);
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        if e.file_type().unwrap().is_dir() {
            out.insert(format!("{rel}/"), None);
            walk(root, &p, out);
        } else {
            out.insert(rel, Some(std::fs::read(&p).unwrap()));
        }
    }
}

/// The names in the board's history directory, sorted.
pub fn history_listing(store: &Store, task: &str) -> Vec<String> {
    let dir = store.root().join("tasks").join(task).join("board").join("history");
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// The absolute path of a task's `board.json`.
pub fn board_json_path(store: &Store, board: &TaskBoard) -> std::path::PathBuf {
    store.path(&board.board_rel().unwrap())
}

/// `board.json` as it is on disk, parsed.
pub fn board_on_disk(store: &Store, board: &TaskBoard) -> BoardFile {
    let bytes = std::fs::read(board_json_path(store, board)).expect("board.json exists");
    serde_json::from_slice(&bytes).expect("board.json parses as a BoardFile")
}
