//! The bridge's decisions against an in-memory GitHub: what is imported, posted,
//! edited, recorded and skipped, and that each entry keeps exactly one comment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::memory::MemoryApi;
use clawboard_entries::EntryStatus;

struct T {
    _dir: tempfile::TempDir,
    store: Store,
    lanes: Lanes,
    settings: GithubSettings,
    gh: MemoryApi,
}

fn setup(issues: &str) -> T {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(dir.path()).unwrap();
    #[derive(serde::Deserialize)]
    struct F {
        github: crate::GithubSection,
    }
    let text = format!("[github]\nenabled = true\nrepository = \"o/r\"\nissues = {issues}\n");
    let section = toml::from_str::<F>(&text).unwrap().github;
    let settings = GithubSettings::resolve(section, |p: &str| PathBuf::from(p), |_| true).unwrap();
    T { _dir: dir, store, lanes: Lanes::default(), settings, gh: MemoryApi::new() }
}

impl T {
    async fn sync(&mut self) -> Report {
        sync(&self.store, &self.lanes, &self.settings, &mut self.gh, Utc::now()).await.unwrap()
    }

    fn local(&self, id: &str) -> Entry {
        entries::read(&self.store, id).unwrap().1
    }

    fn render(&self, id: &str) -> String {
        entries::render(&self.local(id), entries::DEFAULT_MARKER)
    }
}

fn entry(id: &str, issue: Option<u64>, updated: &str) -> Entry {
    let text = format!(
        r#"{{"id": "{id}", "from": "Human", "to": "Aya", "project_id": "vpm-mini", "kind": "doc_update_proposal_request",
            "status": "open", "payload": {{"summary": "s"}}, "target_docs": ["STATE/current_state.md"],
            "created_at": "2025-11-30T02:30:00+09:00", "updated_at": "{updated}"}}"#
    );
    let mut e: Entry = clawboard_core::validate::parse("test", text.as_bytes(), &Default::default()).unwrap();
    e.source_issue = issue.map(SourceRef::Number);
    e
}

const T0: &str = "2025-11-30T02:30:00+09:00";

#[tokio::test]
async fn comments_with_a_marker_become_local_entries_and_broken_ones_are_reported() {
    let mut t = setup("[{ numbers = [571] }]");
    t.gh.issue(571, &[]);
    t.gh.comment(571, "LGTM, thanks");
    let c1 = t.gh.comment(571, &entries::render(&entry("e1", None, T0), "blackboard:doc_update_v1"));
    let bad = t.gh.comment(571, "<!-- blackboard:doc_update_v1 -->\n\njson\n{'id': 'e2'}");
    let fenced = format!(
        "<!-- blackboard:doc_update_v1 -->\n```json\n{}```\nthanks!",
        clawboard_core::store::to_pretty_json(&entry("e3", None, T0))
    );
    t.gh.comment(571, &fenced);
    let r = t.sync().await;
    assert_eq!(r.imported.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["e1", "e3"]);
    let e1 = t.local("e1");
    assert_eq!((e1.source_issue, e1.source_comment_id), (Some(SourceRef::Number(571)), Some(SourceRef::Number(c1))));
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert_eq!((r.skipped[0].issue, r.skipped[0].comment), (Some(571), Some(bad)));
    assert!(r.skipped[0].reason.contains("rule 3 (one JSON object)"), "{}", r.skipped[0].reason);
    // The imported entries' comments now carry where they live, in the canonical form.
    assert_eq!(r.edited.len(), 2);
    assert!(t.gh.writes().iter().all(|(m, _)| *m == "PATCH"));
    assert_eq!(t.gh.comments(571)[1].body.as_deref(), Some(t.render("e1").as_str()));
    let again = t.sync().await;
    assert!(again.imported.is_empty() && again.edited.is_empty() && again.posted.is_empty(), "{again:?}");
}

#[tokio::test]
async fn a_local_entry_gets_exactly_one_comment_that_follows_it() {
    let mut t = setup("[{ numbers = [7] }]");
    t.gh.issue(7, &[]);
    entries::create(&t.store, &entry("e1", Some(7), T0)).unwrap();
    let r = t.sync().await;
    assert_eq!(r.posted.len(), 1);
    let comments = t.gh.comments(7);
    assert_eq!(comments.len(), 1);
    assert_eq!(t.local("e1").source_comment_id, Some(SourceRef::Number(comments[0].id)));
    assert_eq!(comments[0].body.as_deref(), Some(t.render("e1").as_str()), "the comment is `entry render`");
    let writes = t.gh.writes().len();
    let quiet = t.sync().await;
    assert!(quiet.posted.is_empty() && quiet.edited.is_empty() && quiet.recorded.is_empty(), "{quiet:?}");
    assert_eq!(t.gh.writes().len(), writes, "nothing to write the second time");

    entries::set_status(&t.store, "e1", "Human", EntryStatus::Done, None, Utc::now()).unwrap();
    let changed = t.sync().await;
    assert_eq!(changed.edited.len(), 1);
    let comments = t.gh.comments(7);
    assert_eq!(comments.len(), 1, "still one comment");
    assert_eq!(comments[0].body.as_deref(), Some(t.render("e1").as_str()));
    assert!(comments[0].body.as_deref().unwrap().contains("\"status\": \"done\""));
}

#[tokio::test]
async fn a_comment_posted_by_a_run_that_died_is_found_by_entry_id_not_posted_again() {
    let mut t = setup("[{ numbers = [7] }]");
    t.gh.issue(7, &[]);
    let e = entry("e1", Some(7), T0);
    entries::create(&t.store, &e).unwrap();
    // The last run posted it, and died before recording the comment's id.
    let id = t.gh.comment(7, &entries::render(&e, entries::DEFAULT_MARKER));
    let r = t.sync().await;
    assert!(r.posted.is_empty(), "{r:?}");
    assert_eq!(r.recorded, [Item { id: "e1".into(), issue: 7, comment: id }]);
    assert_eq!(t.gh.comments(7).len(), 1);
    assert_eq!(t.local("e1").source_comment_id, Some(SourceRef::Number(id)));
    assert_eq!(t.gh.comments(7)[0].body.as_deref(), Some(t.render("e1").as_str()));
}

#[tokio::test]
async fn the_later_updated_at_wins() {
    let mut t = setup("[{ numbers = [7] }]");
    t.gh.issue(7, &[]);
    entries::create(&t.store, &entry("e1", Some(7), T0)).unwrap();
    t.sync().await;
    let comment = t.gh.comments(7)[0].id;
    // Someone edits the comment, moving updated_at: the tree takes it.
    let mut theirs = t.local("e1");
    theirs.status = EntryStatus::InProgress;
    theirs.updated_at = clawboard_core::Timestamp::parse("2025-11-30T03:00:00+09:00").unwrap();
    t.gh.edit(comment, &entries::render(&theirs, entries::DEFAULT_MARKER));
    let r = t.sync().await;
    assert_eq!(r.updated.len(), 1, "{r:?}");
    assert_eq!(t.local("e1"), theirs);
    assert!(r.edited.is_empty(), "the comment already is the entry");
    // An edit that does not move updated_at is put back.
    let mut stale = theirs.clone();
    stale.note = Some("edited by hand".into());
    t.gh.edit(comment, &entries::render(&stale, entries::DEFAULT_MARKER));
    let r = t.sync().await;
    assert!(r.updated.is_empty() && r.edited.len() == 1, "{r:?}");
    assert_eq!(t.local("e1").note, None);
    assert_eq!(t.gh.comments(7)[0].body.as_deref(), Some(t.render("e1").as_str()));
}

#[tokio::test]
async fn labeled_issues_duplicates_and_foreign_copies() {
    let mut t = setup("[{ numbers = [1], label = \"blackboard\" }]");
    t.gh.issue(1, &[]);
    t.gh.issue(2, &["blackboard"]);
    t.gh.issue(3, &["other"]);
    let body = entries::render(&entry("e1", None, T0), entries::DEFAULT_MARKER);
    let foreign = t.gh.comment(2, &body);
    let dup = t.gh.comment(2, &body);
    t.gh.comment(3, &entries::render(&entry("e9", None, T0), entries::DEFAULT_MARKER));
    t.gh.comment(1, &body);
    let r = t.sync().await;
    assert_eq!(r.issues, [1, 2]);
    assert_eq!(r.imported.len(), 1);
    assert_eq!(t.local("e1").source_issue, Some(SourceRef::Number(1)), "the first issue it was found on");
    assert!(entries::find(&t.store, "e9").unwrap().is_none(), "issue 3 is not configured");
    let reasons: Vec<_> = r.skipped.iter().map(|s| (s.comment, s.reason.clone())).collect();
    assert!(reasons.iter().any(|(c, why)| *c == Some(foreign) && why.contains("belongs to issue 1")), "{reasons:?}");
    assert!(reasons.iter().any(|(c, why)| *c == Some(dup) && why.contains("already in comment")), "{reasons:?}");
}

#[tokio::test]
async fn a_broken_comment_of_an_entry_keeps_it_from_being_posted_twice() {
    let mut t = setup("[{ numbers = [7] }]");
    t.gh.issue(7, &[]);
    entries::create(&t.store, &entry("e1", Some(7), T0)).unwrap();
    let broken = t.gh.comment(7, "<!-- blackboard:doc_update_v1 -->\n\njson\n{\"id\": \"e1\", \"from\": ");
    let r = t.sync().await;
    assert!(r.posted.is_empty() && t.gh.comments(7).len() == 1, "{r:?}");
    assert!(r.skipped.iter().any(|s| s.comment == Some(broken) && s.reason.contains("fix or delete")), "{r:?}");
}

#[tokio::test]
async fn a_refused_token_ends_the_run_with_one_error() {
    let mut t = setup("[{ numbers = [7] }]");
    t.gh.issue(7, &[]);
    t.gh.refuse(true);
    let e = sync(&t.store, &t.lanes, &t.settings, &mut t.gh, Utc::now()).await.unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e}");
    assert!(e.to_string().contains("check github.token_env / github.token_file"));
}

#[tokio::test]
async fn a_missing_issue_is_reported_and_the_others_sync() {
    let mut t = setup("[{ numbers = [7, 8] }]");
    t.gh.issue(8, &[]);
    entries::create(&t.store, &entry("e1", Some(8), T0)).unwrap();
    let r = t.sync().await;
    assert_eq!(r.posted.len(), 1);
    assert!(r.skipped.iter().any(|s| s.issue == Some(7) && s.reason.contains("404")), "{r:?}");
}

#[test]
fn ids_of_broken_comments_and_issue_numbers() {
    assert_eq!(broken_id("{\"id\" : \"e-1\", \"from\""), Some("e-1".into()));
    assert_eq!(broken_id("{'id': 'e1'}"), None);
    assert_eq!(broken_id("{\"id\": \"../x\"}"), None);
    assert_eq!(issue_number(&SourceRef::Text("#571".into())), Some(571));
    assert_eq!(issue_number(&SourceRef::Number(5)), Some(5));
    assert_eq!(issue_number(&SourceRef::Text("run-1".into())), None);
    assert!(same_body("a\r\nb\n", "a\nb"));
}
