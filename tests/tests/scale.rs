//! The daemon on a tree past the kernel's event queue (16,384 events by
//! default): it settles after its start and stays idle, and an overflow of the
//! queue is recovered by one rescan that journals every file once. The speed
//! figures at 50,000 tasks are the benchmark's (`scripts/bench/scale`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use clawboard_tests::{Daemon, Tree, sh_config, wait_until};

/// Finished tasks of the shape a blueprint task leaves: five directories each
/// (the task, its board with history and slices, its attempts), two files in each.
fn finished_tasks(root: &Path, tasks: usize) {
    for i in 0..tasks {
        let task = root.join(format!("tasks/task-20261101-000000-{i:06x}"));
        for sub in ["", "board", "board/history", "board/slices", "attempts"] {
            let dir = task.join(sub);
            std::fs::create_dir_all(&dir).unwrap();
            for f in ["a.json", "b.json"] {
                std::fs::write(dir.join(f), format!("{{\"n\": {i}}}\n")).unwrap();
            }
        }
        std::fs::write(
            task.join("task.json"),
            format!(
                r#"{{"taskId": "task-20261101-000000-{i:06x}", "type": "coding", "description": "old", "status": "completed", "createdAt": "2026-11-01T00:00:00Z", "createdBy": "human", "priority": "normal"}}"#
            ),
        )
        .unwrap();
    }
}

/// CPU time (user + system) the process has used, in clock ticks (1/100 s here).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = stat.rsplit_once(')').unwrap().1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> u64 {
    let out = std::process::Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Waits until the daemon has used less than 1 % of a core over two seconds;
/// panics with its log after `secs` (a rescan loop never gets there).
fn wait_idle(d: &Daemon, secs: u64) {
    let hz = ticks_per_second();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let before = cpu_ticks(d.child.id());
        std::thread::sleep(Duration::from_secs(2));
        if (cpu_ticks(d.child.id()) - before) * 100 < 2 * hz {
            return;
        }
        assert!(Instant::now() < deadline, "the daemon was still busy after {secs} s; its log:\n{}", tail(d));
    }
}

fn tail(d: &Daemon) -> String {
    let out = d.output();
    out.chars().skip(out.chars().count().saturating_sub(4000)).collect()
}

fn rescans(d: &Daemon) -> usize {
    d.output().matches("rescanning").count()
}

/// Every journaled put by path: how many times each was journaled.
fn journaled_puts(root: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root.join(".clawboard/journal")).unwrap().flatten() {
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["kind"] == "put" {
                *out.entry(v["path"].as_str().unwrap().to_owned()).or_insert(0) += 1;
            }
        }
    }
    out
}

fn config() -> String {
    sh_config("[sync]\nenabled = false\n")
}

/// 25,000 directories and 55,000 files, watched: a scan that opens every
/// directory makes two events a directory, past the queue. The daemon settles,
/// then stays idle (under 1 % of a core, no rescan) and still takes a dropped task.
#[test]
fn a_tree_past_the_event_queue_settles_and_stays_idle() {
    let t = Tree::init();
    finished_tasks(&t.root, 5_000);
    t.config(&config());
    let d = t.daemon();
    wait_idle(&d, 120);
    let hz = ticks_per_second();
    let (rescans_before, cpu_before) = (rescans(&d), cpu_ticks(d.child.id()));
    std::thread::sleep(Duration::from_secs(15));
    let used = cpu_ticks(d.child.id()) - cpu_before;
    assert_eq!(rescans(&d), rescans_before, "rescans while idle; the log:\n{}", tail(&d));
    assert!(
        used * 100 <= 15 * hz,
        "{used} ticks of CPU in 15 idle seconds (over 1 % of a core); the log:\n{}",
        tail(&d)
    );
    t.drop_task("fresh.json", r#"{"taskId": "fresh", "type": "coding", "description": "after the big start"}"#);
    wait_until(30, "the dropped task done", || t.status_of("fresh") == "completed");
    assert_eq!(d.stop(), 0);
}

/// The daemon stopped (SIGSTOP) while 30,000 files are written: the kernel's
/// queue overflows. Resumed, it rescans once, journals each new file exactly
/// once, and is idle again with no further rescan.
#[test]
fn an_event_queue_overflow_is_recovered_by_one_rescan_and_each_file_journaled_once() {
    let t = Tree::init();
    finished_tasks(&t.root, 200);
    t.config(&config());
    let d = t.daemon();
    wait_idle(&d, 60);
    assert_eq!(rescans(&d), 0, "a rescan before the overflow; the log:\n{}", tail(&d));
    let dir = t.root.join("shared/flood");
    std::fs::create_dir_all(&dir).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the new directory watched
    d.signal("STOP");
    for i in 0..30_000 {
        std::fs::write(dir.join(format!("f{i:05}.md")), format!("{i}\n")).unwrap();
    }
    d.signal("CONT");
    let puts = || journaled_puts(&t.root);
    wait_until(120, "every flooded file journaled", || {
        let p = puts();
        (0..30_000).all(|i| p.contains_key(&format!("shared/flood/f{i:05}.md")))
    });
    wait_idle(&d, 120);
    let twice: Vec<_> = puts().into_iter().filter(|(p, n)| p.starts_with("shared/flood/") && *n > 1).collect();
    assert!(twice.is_empty(), "journaled more than once: {:?}", &twice[..twice.len().min(10)]);
    let after_overflow = rescans(&d);
    assert_eq!(after_overflow, 1, "one rescan for one overflow; the log:\n{}", tail(&d));
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(rescans(&d), after_overflow, "rescans went on; the log:\n{}", tail(&d));
    assert_eq!(d.stop(), 0);
}
