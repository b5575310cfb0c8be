//! The crash test: 500 tasks, the daemon killed with SIGKILL at random moments
//! three times and restarted each time. In the end every task is completed exactly
//! once, none is lost, and each task's role runs are exactly the runs it needs
//! (status `ok`) plus the runs a crash cut short (status `interrupted`).

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use clawboard_tests::{Tree, sh_config, wait_until};

const TASKS: usize = 500;

#[test]
fn kill_dash_nine_three_times_loses_nothing_and_repeats_nothing() {
    let t = Tree::init();
    t.config(&sh_config(""));
    let staging = t.dir.path().join("burst");
    std::fs::create_dir_all(&staging).unwrap();
    for i in 0..TASKS {
        std::fs::write(
            staging.join(format!("c{i}.json")),
            format!(r#"{{"taskId":"c{i}","type":"coding","description":"crash test"}}"#),
        )
        .unwrap();
    }
    let mut seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
    println!("random seed {seed}");
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };

    let d = t.daemon();
    for i in 0..TASKS {
        std::fs::rename(staging.join(format!("c{i}.json")), t.root.join(format!("inbox/c{i}.json"))).unwrap();
    }
    let mut d = Some(d);
    for round in 1..=3 {
        let wait = Duration::from_millis(300 + next() % 2700);
        std::thread::sleep(wait);
        let done = (0..TASKS).filter(|i| t.status_of(&format!("c{i}")) == "completed").count();
        println!("crash {round} after {wait:?}: {done} of {TASKS} completed");
        d.take().unwrap().crash();
        d = Some(t.daemon());
    }
    wait_until(300, "every task to complete", || (0..TASKS).all(|i| t.status_of(&format!("c{i}")) == "completed"));
    assert_eq!(d.take().unwrap().stop(), 0);

    let mut interrupted = 0;
    for i in 0..TASKS {
        let id = format!("c{i}");
        let runs = t.attempts(&id);
        let ok: Vec<&str> = runs.iter().filter(|a| a["status"] == "ok").map(|a| a["step"].as_str().unwrap()).collect();
        assert_eq!(ok, vec!["pm", "iter-1/w", "iter-1/validator", "harvest"], "{id}: {runs:?}");
        for a in &runs {
            assert!(a["status"] == "ok" || a["status"] == "interrupted", "{id}: {a}");
        }
        interrupted += runs.len() - ok.len();
        assert!(t.root.join(format!(".clawboard/claims/{id}")).exists(), "{id} was never claimed");
    }
    println!("{interrupted} runs were interrupted by the crashes");
    // Nothing left half-done: no active tasks, no staged intakes, no temp files, an empty inbox.
    assert_eq!(std::fs::read_dir(t.root.join(".clawboard/active")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(t.root.join(".clawboard/intake")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(t.root.join("inbox")).unwrap().count(), 1, "only rejected/ remains");
    assert_eq!(std::fs::read_dir(t.root.join("inbox/rejected")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(t.root.join("tasks")).unwrap().count(), TASKS);
    let active = std::fs::read_to_string(t.root.join("roles/active.json")).unwrap();
    assert!(!active.contains("inst-"), "{active}");
}
