//! Every example file of seed 002 (in `tests/fixtures/seed-tree/`, laid out as a
//! blackboard tree) parses into its type and serializes back to the same JSON.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clawboard_core::formats::*;
use clawboard_core::validate::{DEFAULT_MAX_FILE_BYTES, check_file};
use clawboard_core::{FileKind, Format, PathContext};
use serde_json::Value;

fn tree() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/seed-tree")
}

fn round_trip<T: Format>(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let original: Value = serde_json::from_str(&text).unwrap();
    let typed: T = serde_json::from_value(original.clone()).unwrap();
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(back, original, "{} does not round-trip", path.display());
}

#[test]
fn every_seed_file_validates_and_round_trips() {
    let mut seen = Vec::new();
    for entry in walkdir::WalkDir::new(tree()) {
        let entry = entry.unwrap();
        if !entry.file_type().is_file() {
            continue;
        }
        let path = entry.path();
        let (kind, _) = check_file(path, None, DEFAULT_MAX_FILE_BYTES).unwrap_or_else(|e| panic!("{e}"));
        match kind {
            FileKind::Task => round_trip::<Task>(path),
            FileKind::TaskSubmission => round_trip::<TaskSubmission>(path),
            FileKind::TeamComposition => round_trip::<TeamComposition>(path),
            FileKind::Result => round_trip::<TaskResult>(path),
            FileKind::Validation => round_trip::<Validation>(path),
            FileKind::MemoryHarvest => round_trip::<MemoryHarvest>(path),
            FileKind::ActiveInstances => round_trip::<ActiveInstances>(path),
            FileKind::MemoryQueue => round_trip::<MemoryQueue>(path),
            FileKind::Escalation => round_trip::<Escalation>(path),
            FileKind::DailyHarvest => round_trip::<DailyHarvest>(path),
            FileKind::WeeklyHarvest => round_trip::<WeeklyHarvest>(path),
            FileKind::RiskLimits => round_trip::<RiskLimits>(path),
            FileKind::NodeStatus => round_trip::<NodeStatus>(path),
            FileKind::KnowledgeSync => round_trip::<KnowledgeSync>(path),
            FileKind::PmPerformance => round_trip::<PmPerformance>(path),
            FileKind::Board => round_trip::<BoardFile>(path),
            FileKind::Entry => round_trip::<Entry>(path),
        }
        seen.push(kind);
    }
    let missing: Vec<_> =
        FileKind::ALL.iter().filter(|k| **k != FileKind::TaskSubmission && !seen.contains(k)).collect();
    assert!(missing.is_empty(), "no seed example for {missing:?}");
}

#[test]
fn unknown_fields_survive_read_modify_write() {
    let text = r#"{"taskId":"t1","type":"research","description":"d","priority":"low",
        "createdBy":"human","createdAt":"2026-02-25T19:00:00+08:00","status":"pending",
        "myTeamField":{"nested":[1,2]},"context":{"source":"telegram","threadTs":"17.2"}}"#;
    let mut task: Task = serde_json::from_str(text).unwrap();
    task.status = TaskStatus::Running;
    let back = serde_json::to_value(&task).unwrap();
    assert_eq!(back["myTeamField"]["nested"][1], 2);
    assert_eq!(back["context"]["threadTs"], "17.2");
    assert_eq!(back["status"], "running");
}

#[test]
fn the_example_submission_is_valid() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/examples/task.json");
    let (kind, _) = check_file(&path, None, DEFAULT_MAX_FILE_BYTES).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kind, FileKind::TaskSubmission);
}

#[test]
fn task_id_must_match_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks/t2/task.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(tree().join("tasks/task-20260225-001/task.json"), &path).unwrap();
    let err = check_file(&path, None, DEFAULT_MAX_FILE_BYTES).unwrap_err().to_string();
    assert!(err.ends_with("/taskId: \"task-20260225-001\" does not match its directory tasks/t2/"), "{err}");
    let _ = PathContext::default();
}
