//! One run of the bridge ([`sync`]): for every configured issue (its numbers, and
//! the open issues carrying its label), import the entries its comments hold, then
//! export the local entries that belong to it.
//!
//! - **Import.** A comment starting with a `<!-- blackboard:… -->` marker is read
//!   by the seed's rules; one that fails is reported (issue, comment, the rule) and
//!   skipped. An unknown id becomes a local entry with `source_issue` and
//!   `source_comment_id` set to where it was found; a known one is replaced when
//!   the comment's `updated_at` is later.
//! - **Export.** A local entry whose `source_issue` is the issue and that has no
//!   comment there, looked up by entry id in the listing just made, is posted, then
//!   its comment id recorded (and the comment edited once to carry it). So a run
//!   killed between GitHub storing the comment and the id being recorded finds the
//!   comment by id next time and records it: one comment per entry. A comment that
//!   differs from the entry as rendered, while the local copy is as new or newer,
//!   is edited.
//!
//! Runs of one tree are serialized by a lock file (the daemon's and a command's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use clawboard_core::{Store, layout};
use clawboard_entries::comment::has_marker;
use clawboard_entries::{self as entries, Entry, Filter, Lanes, SourceRef};

use crate::client::{Api, Comment};
use crate::error::{Error, Result};
use crate::settings::GithubSettings;

mod report;
pub use report::{Item, Report, Skipped};

/// `.clawboard/github`: the bridge's cache and lock.
pub fn state_dir(root: &Path) -> PathBuf {
    root.join(layout::STATE).join("github")
}

/// An entry as found in a comment.
struct Remote {
    comment: u64,
    body: String,
    entry: Entry,
}

/// What an issue's comments hold.
#[derive(Default)]
struct Listing {
    entries: BTreeMap<String, Remote>,
    /// Entry id -> a comment of it that no longer parses.
    broken: BTreeMap<String, u64>,
}

/// An error that concerns one issue or one entry (GitHub refused that request):
/// reported, and the run goes on. Anything else (the token, rate limits, the
/// network, GitHub failing) ends the run.
fn is_local(e: &Error) -> bool {
    matches!(e, Error::Status { status, .. } if (400..500).contains(status))
}

/// The issue number a `source_issue` names (`571`, `"571"` or `"#571"`).
pub fn issue_number(s: &SourceRef) -> Option<u64> {
    match s {
        SourceRef::Number(n) => Some(*n),
        SourceRef::Text(t) => t.trim().trim_start_matches('#').parse().ok(),
    }
}

/// Comment bodies compare without their line ends' form and trailing blanks.
fn same_body(a: &str, b: &str) -> bool {
    a.replace("\r\n", "\n").trim_end() == b.replace("\r\n", "\n").trim_end()
}

/// Runs the bridge once over `settings`' issues.
pub async fn sync<A: Api>(
    store: &Store,
    lanes: &Lanes,
    settings: &GithubSettings,
    api: &mut A,
    now: DateTime<Utc>,
) -> Result<Report> {
    let repository = settings.repository()?.to_string();
    let _lock = lock(store.root()).await?;
    api.begin()?;
    let before = api.stats();
    let at = clawboard_core::Timestamp::from_utc(now).to_string();
    let mut report = Report { repository, at, ..Report::default() };
    let (_, broken) = entries::list(store, &Filter::default())?;
    for b in broken {
        report.skip(None, None, None, format!("a local entry file cannot be read: {b}"));
    }
    let mut issues: BTreeMap<u64, Option<String>> = BTreeMap::new();
    for set in &settings.issues {
        for n in &set.numbers {
            issues.entry(*n).or_insert_with(|| set.lane.clone());
        }
        if let Some(label) = &set.label {
            for n in api.list_labeled(label).await? {
                issues.entry(n).or_insert_with(|| set.lane.clone());
            }
        }
    }
    report.issues = issues.keys().copied().collect();
    for (issue, lane) in &issues {
        tracing::debug!(issue, lane = lane.as_deref().unwrap_or("-"), "github: syncing an issue");
        sync_issue(store, lanes, settings, api, *issue, &mut report, now).await?;
    }
    api.finish()?;
    let after = api.stats();
    report.requests = after.requests - before.requests;
    report.not_modified = after.not_modified - before.not_modified;
    report.rate_limited = after.rate_limited - before.rate_limited;
    Ok(report)
}

async fn sync_issue<A: Api>(
    store: &Store,
    lanes: &Lanes,
    settings: &GithubSettings,
    api: &mut A,
    issue: u64,
    report: &mut Report,
    now: DateTime<Utc>,
) -> Result<()> {
    let comments = match api.list_comments(issue).await {
        Ok(c) => c,
        Err(e) if is_local(&e) => {
            report.skip(Some(issue), None, None, e.to_string());
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let listing = read_comments(issue, comments, report, &|c, id| trusted(store, settings, c, id));
    for remote in listing.entries.values() {
        import(store, issue, remote, report, now);
    }
    let (locals, _) = entries::list(store, &Filter::default())?;
    let mut wrote = false;
    for entry in locals {
        if entry.source_issue.as_ref().and_then(issue_number) == Some(issue) {
            wrote |= export(store, lanes, api, issue, entry, &listing, report).await?;
        }
    }
    if wrote {
        // Listed again so that the cache holds what GitHub now has: the next run
        // with nothing new is all 304s.
        api.list_comments(issue).await?;
    }
    Ok(())
}

/// Whether comment `c`, holding entry `id`, may create or change it: it is the
/// comment the local entry is bound to (posted by this bridge, or taken before),
/// or its writer is trusted ([`GithubSettings::trusts`]).
fn trusted(store: &Store, settings: &GithubSettings, c: &Comment, id: &str) -> Result<(), String> {
    let bound = entries::read(store, id)
        .ok()
        .and_then(|(_, e)| e.source_comment_id)
        .is_some_and(|s| issue_number(&s) == Some(c.id));
    if bound { Ok(()) } else { settings.trusts(c.author(), c.author_association.as_deref()) }
}

fn read_comments(
    issue: u64,
    comments: Vec<Comment>,
    report: &mut Report,
    trust: &dyn Fn(&Comment, &str) -> std::result::Result<(), String>,
) -> Listing {
    let mut listing = Listing::default();
    for c in comments {
        let body = c.body.clone().unwrap_or_default();
        if !has_marker(&body) {
            continue;
        }
        match entries::parse(&body) {
            Err(e) => {
                let id = broken_id(&body);
                report.skip(Some(issue), Some(c.id), id.as_deref(), format!("the comment is not an entry: {e}"));
                if let Some(id) = id {
                    listing.broken.entry(id).or_insert(c.id);
                }
            }
            Ok(p) => {
                let id = p.entry.id.to_string();
                if let Err(why) = trust(&c, &id) {
                    // Not an entry of this tree's: neither taken nor written over.
                    report.skip(Some(issue), Some(c.id), Some(&id), format!("not taken: {why}"));
                    continue;
                }
                if let Some(first) = listing.entries.get(&id) {
                    let why =
                        format!("entry {id} is already in comment {}; this second copy is ignored", first.comment);
                    report.skip(Some(issue), Some(c.id), Some(&id), why);
                    continue;
                }
                listing.entries.insert(id, Remote { comment: c.id, body, entry: p.entry });
            }
        }
    }
    listing
}

/// The id a broken entry comment still names (`"id": "…"`), so that the entry is
/// not posted a second time beside it.
fn broken_id(body: &str) -> Option<String> {
    let at = body.find("\"id\"")?;
    let rest = body[at + 4..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let id = &rest[..rest.find('"')?];
    clawboard_core::Id::new(id).ok().map(|_| id.to_owned())
}

/// Takes one entry found on `issue` into the tree (new, or newer than the local copy).
fn import(store: &Store, issue: u64, r: &Remote, report: &mut Report, now: DateTime<Utc>) {
    let id = r.entry.id.to_string();
    let item = Item { id: id.clone(), issue, comment: r.comment };
    let mut found = r.entry.clone();
    found.source_issue = Some(SourceRef::Number(issue));
    found.source_comment_id = Some(SourceRef::Number(r.comment));
    let skip = |report: &mut Report, why: String| report.skip(Some(issue), Some(r.comment), Some(&id), why);
    // A time to come would win every later comparison: such a copy is not taken.
    if found.updated_at.instant().with_timezone(&Utc) > now + chrono::Duration::minutes(5) {
        return skip(report, format!("its updated_at ({}) is in the future", found.updated_at));
    }
    let local = match entries::read(store, &id) {
        Ok((_, local)) => local,
        Err(entries::Error::NotFound(_)) => {
            match entries::create(store, &found) {
                Ok(rel) => {
                    tracing::info!(issue, comment = r.comment, "github: imported entry {id} ({rel})");
                    report.imported.push(item);
                }
                Err(e) => skip(report, format!("not imported: {e}")),
            }
            return;
        }
        Err(e) => return skip(report, format!("the local copy cannot be read: {e}")),
    };
    match local.source_issue.as_ref() {
        Some(s) if issue_number(s) != Some(issue) => {
            let why = format!("entry {id} belongs to issue {s} (its source_issue); this copy is not synced");
            return skip(report, why);
        }
        Some(_) => {}
        // A local entry not yet on GitHub that someone posted here: it lives here now.
        None => {
            if let Err(e) =
                entries::set_source(store, &id, SourceRef::Number(issue), Some(SourceRef::Number(r.comment)))
            {
                return skip(report, format!("cannot record its comment: {e}"));
            }
        }
    }
    if found.updated_at.instant() > local.updated_at.instant() {
        if found.status != local.status
            && let Err(why) = entries::lifecycle::check_transition(local.status, found.status)
        {
            return skip(report, format!("the newer comment is not taken: {why}"));
        }
        match entries::replace(store, &found) {
            Ok(true) => {
                tracing::info!(issue, comment = r.comment, "github: entry {id} updated from its newer comment");
                report.updated.push(item);
            }
            Ok(false) => {}
            Err(e) => skip(report, format!("the newer comment is not taken: {e}")),
        }
    }
}

/// Brings `entry`'s comment on `issue` up to date; true if it wrote to GitHub.
async fn export<A: Api>(
    store: &Store,
    lanes: &Lanes,
    api: &mut A,
    issue: u64,
    entry: Entry,
    listing: &Listing,
    report: &mut Report,
) -> Result<bool> {
    let id = entry.id.to_string();
    let Some(remote) = listing.entries.get(&id) else {
        return post(store, lanes, api, issue, entry, listing, report).await;
    };
    let item = Item { id: id.clone(), issue, comment: remote.comment };
    let mut entry = entry;
    if entry.source_comment_id != Some(SourceRef::Number(remote.comment)) {
        match entries::set_source(store, &id, SourceRef::Number(issue), Some(SourceRef::Number(remote.comment))) {
            Ok(e) => entry = e,
            Err(e) => {
                report.skip(Some(issue), Some(remote.comment), Some(&id), format!("cannot record its comment: {e}"));
                return Ok(false);
            }
        }
        tracing::info!(issue, comment = remote.comment, "github: entry {id}: recorded its comment");
        report.recorded.push(item.clone());
    }
    let body = entries::render(&entry, lanes.marker_of(&entry));
    if same_body(&body, &remote.body) || entry.updated_at.instant() < remote.entry.updated_at.instant() {
        return Ok(false);
    }
    match api.update_comment(remote.comment, &body).await {
        Ok(_) => {
            tracing::info!(issue, comment = remote.comment, "github: entry {id}: edited its comment");
            report.edited.push(item);
            Ok(true)
        }
        Err(e) if is_local(&e) => {
            report.skip(Some(issue), Some(remote.comment), Some(&id), format!("its comment is not edited: {e}"));
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Posts an entry that has no comment on `issue`, then records the comment.
async fn post<A: Api>(
    store: &Store,
    lanes: &Lanes,
    api: &mut A,
    issue: u64,
    entry: Entry,
    listing: &Listing,
    report: &mut Report,
) -> Result<bool> {
    let id = entry.id.to_string();
    if let Some(c) = listing.broken.get(&id) {
        let why = format!(
            "its comment {c} no longer reads as an entry; fix or delete that comment (nothing is posted beside it)"
        );
        report.skip(Some(issue), Some(*c), Some(&id), why);
        return Ok(false);
    }
    if let Some(c) = &entry.source_comment_id {
        let why = format!(
            "its comment {c} is gone from the issue (deleted on GitHub?); not posted again: remove source_comment_id from the entry to post it anew"
        );
        report.skip(Some(issue), None, Some(&id), why);
        return Ok(false);
    }
    let body = entries::render(&entry, lanes.marker_of(&entry));
    let comment = match api.create_comment(issue, &body).await {
        Ok(c) => c,
        Err(e) if is_local(&e) => {
            report.skip(Some(issue), None, Some(&id), format!("not posted: {e}"));
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    tracing::info!(issue, comment = comment.id, "github: posted entry {id}");
    let item = Item { id: id.clone(), issue, comment: comment.id };
    report.posted.push(item);
    let recorded = match entries::set_source(store, &id, SourceRef::Number(issue), Some(SourceRef::Number(comment.id)))
    {
        Ok(e) => e,
        Err(e) => {
            // The next run finds the comment by the entry's id and records it.
            report.skip(Some(issue), Some(comment.id), Some(&id), format!("posted, but not recorded: {e}"));
            return Ok(true);
        }
    };
    let final_body = entries::render(&recorded, lanes.marker_of(&recorded));
    if !same_body(&final_body, &body) {
        // The comment carries its own id from now on, as `entry render` shows it.
        match api.update_comment(comment.id, &final_body).await {
            Ok(_) => {}
            Err(e) if is_local(&e) => {
                report.skip(Some(issue), Some(comment.id), Some(&id), format!("posted, not edited: {e}"));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Holds `.clawboard/github/sync.lock`, waiting (up to ten minutes) for a run
/// already under way.
async fn lock(root: &Path) -> Result<std::fs::File> {
    let dir = state_dir(root);
    std::fs::create_dir_all(&dir).map_err(|e| clawboard_core::Error::io(&dir, e))?;
    let path = dir.join("sync.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| clawboard_core::Error::io(&path, e))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let mut said = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !said {
                    tracing::info!("github: another sync of this tree is running; waiting for it");
                    said = true;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(Error::Busy(path.display().to_string()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(clawboard_core::Error::io(&path, e).into()),
        }
    }
}

#[cfg(test)]
mod tests;
