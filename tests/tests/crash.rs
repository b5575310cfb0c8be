//! A writer killed between writing its temp file and renaming it into place
//! leaves no partial file; the next start removes the temp.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use clawboard_tests::Tree;

#[test]
fn kill_before_rename_leaves_no_partial_task_and_init_cleans_up() {
    let t = Tree::init();
    let before = t.snapshot();
    let body = br#"{"taskId":"crash-1","type":"coding","description":"written while we pull the plug"}"#;
    let file = t.scratch("task.json", body);

    let mut child = t
        .command(&["task", "submit", file.to_str().unwrap()])
        .env("CLAWBOARD_FAULT", "pause-before-rename")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the writer says its temp file is durable and it is about to rename.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("paused before renaming"), "{line}");
    child.kill().unwrap(); // SIGKILL: no destructor, no cleanup runs
    child.wait().unwrap();

    let task_dir = t.root.join("tasks/crash-1");
    assert!(!task_dir.join("task.json").exists(), "a partial task.json is visible");
    let temps: Vec<String> =
        std::fs::read_dir(&task_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(temps.len(), 1, "{temps:?}");
    assert!(temps[0].contains(".clawboard-tmp."), "{temps:?}");
    // The temp holds the whole new content: the crash came after the fsync.
    let temp: serde_json::Value = serde_json::from_slice(&std::fs::read(task_dir.join(&temps[0])).unwrap()).unwrap();
    assert_eq!(temp["taskId"], "crash-1");

    // The next start removes it, and the same submission then goes through.
    let r = t.run(&["init"]);
    r.ok();
    assert!(r.stdout.contains("Removed tasks/crash-1/.task.json.clawboard-tmp."), "{}", r.stdout);
    let mut after = t.snapshot();
    after.remove("tasks/crash-1/");
    assert_eq!(after, before);
    t.run(&["task", "submit", file.to_str().unwrap()]).ok();
    assert!(task_dir.join("task.json").is_file());
}
