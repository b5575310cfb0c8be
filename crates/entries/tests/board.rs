//! Entries on disk: creation, ids, listing, and the status lifecycle with its
//! rights, each refusal leaving the file as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, Utc};
use clawboard_core::Store;
use clawboard_entries::{
    Entry, EntryStatus, Error, Filter, create, create_picked, find, list, new_id, read, rel_path, set_status,
};
use rstest::rstest;

fn tree() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(dir.path()).unwrap();
    (dir, store)
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn request(id: &str, from: &str, to: &str) -> Entry {
    let text = format!(
        r#"{{"id": "{id}", "from": "{from}", "to": "{to}", "project_id": "vpm-mini",
            "kind": "doc_update_proposal_request", "status": "open",
            "payload": {{"summary": "s"}}, "target_docs": ["STATE/current_state.md"],
            "created_at": "2025-11-30T02:30:00+09:00", "updated_at": "2025-11-30T02:30:00+09:00"}}"#
    );
    clawboard_core::validate::parse("test", text.as_bytes(), &Default::default()).unwrap()
}

fn bytes(store: &Store, id: &str) -> Vec<u8> {
    std::fs::read(store.path(&find(store, id).unwrap().unwrap())).unwrap()
}

#[test]
fn an_entry_is_created_once_under_its_project_and_read_back() {
    let (_d, store) = tree();
    let e = request("e1", "Human", "Aya");
    let rel = create(&store, &e).unwrap();
    assert_eq!(rel.to_string(), "entries/vpm-mini/e1.json");
    assert_eq!(read(&store, "e1").unwrap().1, e);
    let mut again = e.clone();
    again.project_id = clawboard_core::Id::new("other").unwrap();
    let err = create(&store, &again).unwrap_err();
    assert!(matches!(err, Error::Duplicate { .. }), "{err}");
    assert!(err.to_string().contains("entries/vpm-mini/e1.json"), "{err}");
    assert!(!store.root().join("entries/other/e1.json").exists());
}

#[test]
fn ids_count_up_per_project_and_source() {
    let (_d, store) = tree();
    assert_eq!(new_id(&store, "vpm-mini", "issue571").unwrap().as_str(), "vpm-mini-issue571-1");
    create(&store, &request("vpm-mini-issue571-1", "Human", "Aya")).unwrap();
    create(&store, &request("vpm-mini-issue571-7", "Human", "Aya")).unwrap();
    assert_eq!(new_id(&store, "vpm-mini", "issue571").unwrap().as_str(), "vpm-mini-issue571-8");
    assert_eq!(new_id(&store, "vpm-mini", "run42").unwrap().as_str(), "vpm-mini-run42-1");
    assert!(new_id(&store, "../x", "s").unwrap_err().to_string().contains("project_id"));
    assert!(new_id(&store, "p", "a/b").unwrap_err().to_string().contains("field id"));
}

/// Writers that pick an id for the same project and source at once, each before
/// the others wrote theirs, all get an entry: the later ones move up the counter.
#[test]
fn after_retention_a_counter_goes_on_past_its_deleted_entries() {
    let (_d, store) = tree();
    for n in 1..=3 {
        let mut e = request(&format!("vpm-mini-issue571-{n}"), "Human", "Aya");
        e.status = EntryStatus::Done;
        create(&store, &e).unwrap();
    }
    let policy = clawboard_core::retention::Policy::default();
    let noguard = clawboard_core::retention::NoGuard;
    let plan = clawboard_core::retention::plan(&store, &policy, at("2026-11-29T00:00:00Z"), &noguard).unwrap();
    let report = clawboard_core::retention::execute(&store, &plan, false, &noguard).unwrap();
    assert_eq!(report.files, 2, "{plan:?}");
    assert!(find(&store, "vpm-mini-issue571-3").unwrap().is_some(), "the counter's last entry stays");
    assert_eq!(new_id(&store, "vpm-mini", "issue571").unwrap().as_str(), "vpm-mini-issue571-4");
}

#[test]
fn writers_that_pick_the_same_id_at_once_each_get_their_own() {
    let (_d, store) = tree();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                (0..25)
                    .map(|_| {
                        let mut e = request(new_id(&store, "vpm-mini", "issue571").unwrap().as_str(), "Human", "Aya");
                        e.payload.insert("writer".into(), w.into());
                        create_picked(&store, &mut e).unwrap();
                        e.id.to_string()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 100);
    let (found, broken) = list(&store, &Filter::default()).unwrap();
    assert_eq!((found.len(), broken.len()), (100, 0));
    // A picked id another writer holds is never overwritten.
    let mut late = request("vpm-mini-issue571-1", "Human", "Aya");
    create_picked(&store, &mut late).unwrap();
    assert_eq!(late.id.as_str(), "vpm-mini-issue571-101");
}

#[rstest]
#[case::open_to_in_progress_by_to("Aya", EntryStatus::Open, EntryStatus::InProgress, true)]
#[case::in_progress_to_done_by_to("Aya", EntryStatus::InProgress, EntryStatus::Done, true)]
#[case::open_to_done_by_to("Aya", EntryStatus::Open, EntryStatus::Done, true)]
#[case::open_to_canceled_by_from("Sho", EntryStatus::Open, EntryStatus::Canceled, true)]
#[case::in_progress_to_error_by_human("Human", EntryStatus::InProgress, EntryStatus::Error, true)]
#[case::a_third_actor("Tsugu", EntryStatus::Open, EntryStatus::InProgress, false)]
#[case::done_is_final("Aya", EntryStatus::Done, EntryStatus::InProgress, false)]
#[case::never_back_to_open("Human", EntryStatus::InProgress, EntryStatus::Open, false)]
#[case::error_is_final("Human", EntryStatus::Error, EntryStatus::Canceled, false)]
fn a_status_changes_only_as_the_seed_allows_and_by_whom_it_allows(
    #[case] actor: &str,
    #[case] from: EntryStatus,
    #[case] to: EntryStatus,
    #[case] allowed: bool,
) {
    let (_d, store) = tree();
    let mut e = request("e1", "Sho", "Aya");
    e.status = from;
    create(&store, &e).unwrap();
    let before = bytes(&store, "e1");
    let now = at("2026-01-01T00:00:00Z");
    match set_status(&store, "e1", actor, to, None, now) {
        Ok(changed) => {
            assert!(allowed, "{actor}: {from} -> {to} went through");
            assert_eq!(changed.status, to);
            assert_eq!(changed.updated_at.as_str(), "2026-01-01T00:00:00Z");
            assert_eq!(read(&store, "e1").unwrap().1, changed);
        }
        Err(err) => {
            assert!(!allowed, "{actor}: {from} -> {to} refused: {err}");
            assert!(matches!(err, Error::NotAllowed { .. } | Error::Transition { .. }), "{err}");
            assert!(err.to_string().contains("entry e1"), "{err}");
            assert_eq!(bytes(&store, "e1"), before, "a refusal changes nothing");
        }
    }
}

#[test]
fn updated_at_moves_on_every_change_even_within_a_second_or_with_a_clock_behind() {
    let (_d, store) = tree();
    create(&store, &request("e1", "Human", "Aya")).unwrap();
    let now = at("2025-11-29T00:00:00Z"); // before created_at
    let a = set_status(&store, "e1", "Aya", EntryStatus::InProgress, None, now).unwrap();
    assert_eq!(a.updated_at.as_str(), "2025-11-29T17:30:01Z");
    let b = set_status(&store, "e1", "Aya", EntryStatus::Done, Some("applied".into()), now).unwrap();
    assert_eq!(b.updated_at.as_str(), "2025-11-29T17:30:02Z");
    assert_eq!(b.note.as_deref(), Some("applied"));
}

#[test]
fn listing_filters_by_project_addressee_kind_and_status_and_reports_broken_files() {
    let (_d, store) = tree();
    create(&store, &request("e1", "Human", "Aya")).unwrap();
    create(&store, &request("e2", "Aya", "Sho")).unwrap();
    set_status(&store, "e1", "Aya", EntryStatus::Done, None, at("2026-01-01T00:00:00Z")).unwrap();
    std::fs::write(store.root().join("entries/vpm-mini/bad.json"), "{").unwrap();
    let ids = |f: Filter| list(&store, &f).unwrap().0.into_iter().map(|e| e.id.to_string()).collect::<Vec<_>>();
    assert_eq!(ids(Filter::default()), ["e1", "e2"]);
    assert_eq!(ids(Filter { to: Some("Sho".into()), ..Default::default() }), ["e2"]);
    assert_eq!(ids(Filter { status: Some(EntryStatus::Done), ..Default::default() }), ["e1"]);
    assert_eq!(ids(Filter { project: Some("nope".into()), ..Default::default() }), Vec::<String>::new());
    assert_eq!(ids(Filter { kind: Some("other".into()), ..Default::default() }), Vec::<String>::new());
    let broken = list(&store, &Filter::default()).unwrap().1;
    assert_eq!(broken.len(), 1);
    assert!(broken[0].to_string().contains("entries/vpm-mini/bad.json"), "{}", broken[0]);
}

#[test]
fn hostile_entries_are_refused_and_write_nothing() {
    let (_d, store) = tree();
    let parse =
        |text: &str| clawboard_core::validate::parse::<Entry>("hostile.json", text.as_bytes(), &Default::default());
    let good = serde_json::to_value(request("e1", "Human", "Aya")).unwrap();
    let with = |field: &str, v: serde_json::Value| {
        let mut x = good.clone();
        x[field] = v;
        x.to_string()
    };
    for (field, value, says) in [
        ("id", serde_json::json!("../escape"), "/id"),
        ("project_id", serde_json::json!("a/b"), "/project_id"),
        ("status", serde_json::json!("closed"), "/status"),
        ("payload", serde_json::json!("text"), "/payload"),
        ("target_docs", serde_json::json!("STATE.md"), "/target_docs"),
        ("from", serde_json::json!(""), "/from"),
        ("to", serde_json::json!(7), "/to"),
        ("created_at", serde_json::json!("2025-11-30 02:30"), "/created_at"),
        ("updated_at", serde_json::json!("2025-11-29T00:00:00Z"), "/updated_at"),
    ] {
        let err = parse(&with(field, value)).unwrap_err().to_string();
        assert!(err.contains("hostile.json") && err.contains(says), "{field}: {err}");
    }
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("kind");
    assert!(parse(&missing.to_string()).unwrap_err().to_string().contains("kind"));

    let mut big = request("e-big", "Human", "Aya");
    big.payload.insert("blob".into(), serde_json::Value::String("x".repeat(10 * 1024 * 1024)));
    let err = create(&store, &big).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert!(rel_path("../x", "e1").is_err() && rel_path("p", "..").is_err());
    assert!(matches!(find(&store, "../../etc/passwd").unwrap_err(), Error::BadField { field: "id", .. }));
    assert_eq!(std::fs::read_dir(store.root().join("entries")).unwrap().count(), 0, "nothing was written");
}

#[test]
fn a_file_whose_id_or_project_disagrees_with_its_path_is_refused_on_read() {
    let (_d, store) = tree();
    create(&store, &request("e1", "Human", "Aya")).unwrap();
    let text = std::fs::read_to_string(store.root().join("entries/vpm-mini/e1.json")).unwrap();
    std::fs::create_dir_all(store.root().join("entries/other")).unwrap();
    std::fs::write(store.root().join("entries/other/e9.json"), &text).unwrap();
    let err = read(&store, "e9").unwrap_err().to_string();
    assert!(err.contains("/id") && err.contains("e9.json"), "{err}");
    assert!(err.contains("/project_id") && err.contains("entries/other/"), "{err}");
}
