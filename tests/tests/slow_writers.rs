//! Task files written in several pieces, with pauses, by writers that keep the file
//! open and by writers that close it between pieces, into `inbox/`, into a new
//! `tasks/{id}/` and into an existing one, while the machine is busy: each is taken
//! once, whole, and none is rejected. A file that stays broken once its writer is
//! done is rejected, and the directory it alone made goes with it.

use std::process::{Child, Command};

use clawboard_tests::{Tree, sh_config, wait_until};

/// Two shell loops that keep both cores busy; killed when dropped, also when a test
/// assertion fails.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Load {
        Load((0..2).map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap()).collect())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The three pieces of task `id`'s JSON.
fn pieces(id: &str) -> [String; 3] {
    [
        format!(r#"{{"taskId":"{id}","#),
        r#""type":"coding","#.to_owned(),
        r#""description":"written slowly"}"#.to_owned(),
    ]
}

/// A shell writer of `path` (relative to the root): `one_open` keeps the file open
/// across the pauses (`{ …; sleep; … } > f`), otherwise it closes after each piece
/// (`printf > f; sleep; printf >> f`).
fn writer(t: &Tree, path: &str, id: &str, one_open: bool, mkdir: bool) -> Child {
    let [a, b, c] = pieces(id).map(|p| format!("'{p}'"));
    let mk = if mkdir { format!("mkdir -p \"$(dirname {path})\" && ") } else { String::new() };
    let script = if one_open {
        format!("{mk}{{ printf %s {a}; sleep 0.3; printf %s {b}; sleep 0.3; printf %s {c}; }} > {path}")
    } else {
        format!("{mk}printf %s {a} > {path}; sleep 0.3; printf %s {b} >> {path}; sleep 0.3; printf %s {c} >> {path}")
    };
    Command::new("sh").args(["-c", &script]).current_dir(&t.root).spawn().unwrap()
}

fn rejected(t: &Tree) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(t.root.join("inbox/rejected"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn files_written_in_pieces_are_taken_whole_under_load() {
    let t = Tree::init();
    t.config(&sh_config(""));
    for id in ["old-1", "old-2"] {
        std::fs::create_dir_all(t.root.join("tasks").join(id)).unwrap();
    }
    let d = t.daemon();
    let _load = Load::start();
    let mut writers = vec![
        writer(&t, "inbox/in-1.json", "in-1", true, false),
        writer(&t, "inbox/in-2.json", "in-2", false, false),
        writer(&t, "tasks/new-1/task.json", "new-1", true, true),
        writer(&t, "tasks/new-2/task.json", "new-2", false, true),
        writer(&t, "tasks/old-1/task.json", "old-1", true, false),
        writer(&t, "tasks/old-2/task.json", "old-2", false, false),
    ];
    // Twenty ordinary drops at the same time.
    for i in 0..20 {
        t.drop_task(
            &format!("quick-{i}.json"),
            &format!(r#"{{"taskId":"quick-{i}","type":"coding","description":"q"}}"#),
        );
    }
    for w in &mut writers {
        assert!(w.wait().unwrap().success());
    }
    let slow = ["in-1", "in-2", "new-1", "new-2", "old-1", "old-2"];
    let all: Vec<String> = slow.iter().map(|s| (*s).to_owned()).chain((0..20).map(|i| format!("quick-{i}"))).collect();
    wait_until(120, "every task completed", || all.iter().all(|id| t.status_of(id) == "completed"));
    assert_eq!(rejected(&t), Vec::<String>::new(), "nothing was rejected\n{}", d.output());
    for id in slow {
        let task = t.task(id).unwrap();
        assert_eq!(task["description"], "written slowly", "{id}: taken whole");
        assert_eq!(task["taskId"], id);
    }
    assert!(!d.output().contains("ends too early"), "{}", d.output());
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_file_still_broken_when_its_writer_is_done_is_rejected_and_its_empty_directory_removed() {
    let t = Tree::init();
    t.config(&sh_config(""));
    let d = t.daemon();
    let started = std::time::Instant::now();
    let cut = |path: &str| {
        let script = format!("mkdir -p \"$(dirname {path})\" && printf '{{\"type\":\"coding\",' > {path}");
        assert!(Command::new("sh").args(["-c", &script]).current_dir(&t.root).status().unwrap().success());
    };
    cut("tasks/broken/task.json");
    cut("inbox/broken.json");
    wait_until(30, "both rejected", || rejected(&t).len() == 4);
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(2),
        "rejected only after two quiet seconds, not at once"
    );
    assert_eq!(
        rejected(&t),
        ["broken.json", "broken.json.error.txt", "broken.task.json", "broken.task.json.error.txt"]
    );
    let why = std::fs::read_to_string(t.root.join("inbox/rejected/broken.task.json.error.txt")).unwrap();
    assert!(why.starts_with("tasks/broken/task.json: /: the JSON ends too early"), "{why}");
    // The file is moved to rejected/ before its directory is removed.
    wait_until(10, "the directory the writer made is gone", || !t.root.join("tasks/broken").exists());
    assert!(t.task("broken").is_none());
    assert_eq!(d.stop(), 0);
}
