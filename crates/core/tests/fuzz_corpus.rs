#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Replays the cargo-fuzz corpus (`fuzz/corpus/{target}/`) through the fuzz targets'
//! own bodies, so every input the fuzzer kept is a regression test of the normal
//! suite (docs/FUZZING.md). The bodies are the very file the fuzz targets call
//! (`fuzz/src/lib.rs`), so both check the same invariants. A missing or empty corpus
//! directory fails the test: it must never pass by testing nothing.

use std::path::{Path, PathBuf};

#[path = "../../../fuzz/src/lib.rs"]
mod bodies;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

/// The files of `fuzz/corpus/{target}/`, sorted; panics when there are none.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    files
}

fn replay(target: &str) {
    let (_, body) = bodies::TARGETS.iter().find(|(name, _)| *name == target).expect("a known target");
    for file in corpus(target) {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let outcome = std::panic::catch_unwind(|| body(&data));
        if let Err(panic) = outcome {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("{target}: {} fails: {msg}\ninput: {:?}", file.display(), String::from_utf8_lossy(&data));
        }
    }
}

#[test]
fn every_target_has_a_test_and_a_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{} is missing: {e}", dir.display())) {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(bodies::TARGETS.iter().any(|(t, _)| *t == name), "fuzz/corpus/{name}/ belongs to no target");
    }
    for (target, _) in bodies::TARGETS {
        assert!(!corpus(target).is_empty());
    }
}

#[test]
fn task_parser() {
    replay("task_parser");
}

#[test]
fn escalation_parser() {
    replay("escalation_parser");
}

#[test]
fn path_check() {
    replay("path_check");
}

#[test]
fn retention_duration() {
    replay("retention_duration");
}

#[test]
fn acl_matcher() {
    replay("acl_matcher");
}

#[test]
fn acl_parse() {
    replay("acl_parse");
}

/// The request split the acl_matcher target uses: `role \n task \n path`.
#[test]
fn acl_matcher_input_format() {
    assert_eq!(bodies::split_request("creator-code\nt1\ntasks/t1/a\nb"), ("creator-code", Some("t1"), "tasks/t1/a\nb"));
    assert_eq!(bodies::split_request("gm\n\ngm/x"), ("gm", None, "gm/x"));
    assert_eq!(bodies::split_request("gm"), ("gm", None, ""));
}

/// The two inputs that made task_parser fail (docs/FUZZING.md, findings 1 and 2, both
/// fixed) stay in its corpus, so `task_parser()` above replays them.
#[test]
fn task_parser_findings_stay_in_the_corpus() {
    for name in ["finding-1-submission-completedAt", "finding-2-float-round-trip"] {
        assert!(corpus_dir("task_parser").join(name).is_file(), "fuzz/corpus/task_parser/{name} is missing");
    }
}
