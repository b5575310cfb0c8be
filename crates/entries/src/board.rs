//! Entries on disk: `entries/{project_id}/{id}.json`, written through the store
//! (atomic, locked, symlink-safe, journaled like every other file), so the daemon
//! sees a new entry in its change journal and sync carries it to other nodes.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use clawboard_core::formats::{Entry, EntryStatus, SourceRef};
use clawboard_core::kind::FileKind;
use clawboard_core::store::{RelPath, to_pretty_json};
use clawboard_core::{Id, Store, Timestamp, layout, validate};

use crate::error::{Error, Result};
use crate::lifecycle::{check_transition, may_change};

/// The largest entry, as written: its comment form must fit in one GitHub issue
/// comment (65,536 characters), the seed's v1 store.
pub const MAX_ENTRY_BYTES: usize = 65_000;

fn checked_id(field: &'static str, value: &str) -> Result<Id> {
    Id::new(value).map_err(|e| Error::BadField { field, value: value.to_owned(), why: e.to_string() })
}

/// `entries/{project}/{id}.json`, refusing a project or id that is not a plain name.
pub fn rel_path(project: &str, id: &str) -> Result<RelPath> {
    let project = checked_id("project_id", project)?;
    let id = checked_id("id", id)?;
    Ok(RelPath::new(&format!("{}/{project}/{id}.json", layout::ENTRIES))?)
}

/// The project directories under `entries/` (real directories only, sorted).
fn projects(store: &Store) -> Result<Vec<String>> {
    let dir = store.root().join(layout::ENTRIES);
    let read = match std::fs::read_dir(&dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(clawboard_core::Error::io(&dir, e).into()),
    };
    let mut out = Vec::new();
    for e in read {
        let e = e.map_err(|err| clawboard_core::Error::io(&dir, err))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if Id::new(&name).is_ok()
            && clawboard_core::store::real_dir(store.root(), &format!("{}/{name}", layout::ENTRIES))
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Where entry `id` is, in whichever project holds it.
pub fn find(store: &Store, id: &str) -> Result<Option<RelPath>> {
    checked_id("id", id)?;
    for project in projects(store)? {
        let rel = rel_path(&project, id)?;
        if store.exists(&rel) {
            return Ok(Some(rel));
        }
    }
    Ok(None)
}

/// Reads entry `id`, checked.
pub fn read(store: &Store, id: &str) -> Result<(RelPath, Entry)> {
    let rel = find(store, id)?.ok_or_else(|| Error::NotFound(id.to_owned()))?;
    let entry = read_file(store, &rel)?;
    Ok((rel, entry))
}

/// An entry as it is written, checked like a file read back (schema, types, the
/// path's rules) and held to [`MAX_ENTRY_BYTES`].
/// Reads the entry file `rel`; one over [`MAX_ENTRY_BYTES`] (written by hand: the
/// writers here refuse it) is refused before it is parsed.
fn read_file(store: &Store, rel: &RelPath) -> Result<Entry> {
    let path = store.root().join(rel.as_path());
    let size = std::fs::symlink_metadata(&path).map_err(|e| clawboard_core::Error::io(&path, e))?.len();
    if size > MAX_ENTRY_BYTES as u64 {
        let id = rel.as_path().file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        return Err(Error::TooLarge { id, size: usize::try_from(size).unwrap_or(usize::MAX), max: MAX_ENTRY_BYTES });
    }
    Ok(store.read(rel)?)
}

fn encode(rel: &RelPath, entry: &Entry) -> Result<String> {
    let text = to_pretty_json(entry);
    if text.len() > MAX_ENTRY_BYTES {
        return Err(Error::TooLarge { id: entry.id.to_string(), size: text.len(), max: MAX_ENTRY_BYTES });
    }
    let ctx = FileKind::infer(rel.as_path()).map(|(_, c)| c).unwrap_or_default();
    validate::parse::<Entry>(&rel.to_string(), text.as_bytes(), &ctx)?;
    Ok(text)
}

/// Writes a new entry. Its id must be unused in every project.
pub fn create(store: &Store, entry: &Entry) -> Result<RelPath> {
    let rel = rel_path(entry.project_id.as_str(), entry.id.as_str())?;
    let text = encode(&rel, entry)?;
    // The look in every project and the create, as one: two writers of one id in
    // two projects would both find it free. A lock of its own, not one of the
    // store's path locks, which `create_bytes` takes inside it.
    let _ids = file_lock(store, "entry-ids.lock")?;
    if let Some(taken) = find(store, entry.id.as_str())? {
        return Err(Error::Duplicate { id: entry.id.to_string(), path: taken.to_string() });
    }
    store.create_bytes(&rel, text.as_bytes()).map_err(|e| match e {
        clawboard_core::Error::AlreadyExists { path } => Error::Duplicate { id: entry.id.to_string(), path },
        other => other.into(),
    })?;
    Ok(rel)
}

/// How many ids after the picked one [`create_picked`] tries.
const PICK_TRIES: u32 = 1000;

/// Writes a new entry whose id was picked with [`new_id`]: when another writer
/// took that id between the pick and the write, the entry takes the next one in
/// its counter. `entry.id` is then the id written.
pub fn create_picked(store: &Store, entry: &mut Entry) -> Result<RelPath> {
    let mut tries = 0;
    loop {
        match create(store, entry) {
            Err(Error::Duplicate { .. }) if tries < PICK_TRIES => {
                entry.id = bump(&entry.id)?;
                tries += 1;
            }
            r => return r,
        }
    }
}

/// `.clawboard/locks/{name}`, locked until dropped: `entry-ids.lock` is held while
/// an entry's id is checked free and the entry created.
pub(crate) fn file_lock(store: &Store, name: &str) -> Result<std::fs::File> {
    let dir = store.root().join(layout::LOCKS);
    let path = dir.join(name);
    let io = |e| Error::from(clawboard_core::Error::io(&path, e));
    std::fs::create_dir_all(&dir).map_err(|e| Error::from(clawboard_core::Error::io(&dir, e)))?;
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io)?;
    file.lock().map_err(io)?;
    Ok(file)
}

/// A new id as the seed advises: the project, the source, and a counter one past
/// the highest already used with that prefix in the project
/// (`vpm-mini-issue571-1`, `vpm-mini-issue571-2`, …).
pub fn new_id(store: &Store, project: &str, source: &str) -> Result<Id> {
    checked_id("project_id", project)?;
    let prefix = format!("{project}-{source}-");
    checked_id("id", &format!("{prefix}1"))?;
    let dir = store.root().join(layout::ENTRIES).join(project);
    let mut highest = 0u64;
    match std::fs::read_dir(&dir) {
        Ok(read) => {
            for e in read {
                let e = e.map_err(|err| clawboard_core::Error::io(&dir, err))?;
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(n) = name
                    .strip_suffix(".json")
                    .and_then(|stem| stem.strip_prefix(&prefix))
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    highest = highest.max(n);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(clawboard_core::Error::io(&dir, e).into()),
    }
    checked_id("id", &format!("{prefix}{}", highest.saturating_add(1)))
}

/// The id after `id` in its counter: `p-issue571-3` -> `p-issue571-4`.
pub fn bump(id: &Id) -> Result<Id> {
    let s = id.as_str();
    let (stem, n) = match s.rsplit_once('-').and_then(|(stem, n)| Some((stem, n.parse::<u64>().ok()?))) {
        Some((stem, n)) => (stem.to_owned(), n.saturating_add(1)),
        None => (s.to_owned(), 2),
    };
    checked_id("id", &format!("{stem}-{n}"))
}

/// Checks `entry` as it would be written: every field rule and the size limit.
pub fn check(entry: &Entry) -> Result<()> {
    let rel = rel_path(entry.project_id.as_str(), entry.id.as_str())?;
    encode(&rel, entry).map(|_| ())
}

/// Which entries to list; `None` matches anything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub project: Option<String>,
    pub to: Option<String>,
    pub kind: Option<String>,
    pub status: Option<EntryStatus>,
}

impl Filter {
    pub fn matches(&self, e: &Entry) -> bool {
        self.project.as_deref().is_none_or(|p| p == e.project_id.as_str())
            && self.to.as_deref().is_none_or(|t| t == e.to)
            && self.kind.as_deref().is_none_or(|k| k == e.kind)
            && self.status.is_none_or(|s| s == e.status)
    }
}

/// The entries that match `filter`, oldest first (then by id), and every entry
/// file of the listed projects that could not be read, with why.
pub fn list(store: &Store, filter: &Filter) -> Result<(Vec<Entry>, Vec<Error>)> {
    let mut entries = Vec::new();
    let mut broken = Vec::new();
    for project in projects(store)? {
        if filter.project.as_deref().is_some_and(|p| p != project) {
            continue;
        }
        let dir = store.root().join(layout::ENTRIES).join(&project);
        let read = std::fs::read_dir(&dir).map_err(|e| clawboard_core::Error::io(&dir, e))?;
        let mut names: Vec<String> = Vec::new();
        for e in read {
            let e = e.map_err(|err| clawboard_core::Error::io(&dir, err))?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        for name in names {
            let Some(stem) = name.strip_suffix(".json") else { continue };
            if clawboard_core::store::is_temp_name(&name) || Id::new(stem).is_err() {
                continue;
            }
            let rel = rel_path(&project, stem)?;
            match read_file(store, &rel) {
                Ok(e) if filter.matches(&e) => entries.push(e),
                Ok(_) => {}
                Err(e) => broken.push(e),
            }
        }
    }
    entries.sort_by(|a, b| (a.created_at.instant(), a.id.as_str()).cmp(&(b.created_at.instant(), b.id.as_str())));
    Ok((entries, broken))
}

/// The time an entry changed at `now`: `now` to the second, but always after
/// `previous`, so `updated_at` moves on every change (and the later one wins when
/// two copies meet).
pub fn next_update(previous: &Timestamp, now: DateTime<Utc>) -> Timestamp {
    let now = now.duration_trunc(TimeDelta::seconds(1)).unwrap_or(now);
    let previous = previous.instant().with_timezone(&Utc);
    Timestamp::from_utc(if now > previous { now } else { previous + TimeDelta::seconds(1) })
}

/// Moves entry `id` to `status` on behalf of `actor`, under the file's lock:
/// refused (and nothing written) unless `actor` may change it and the seed allows
/// the transition. `note`, if given, replaces the entry's note.
pub fn set_status(
    store: &Store,
    id: &str,
    actor: &str,
    status: EntryStatus,
    note: Option<String>,
    now: DateTime<Utc>,
) -> Result<Entry> {
    let rel = find(store, id)?.ok_or_else(|| Error::NotFound(id.to_owned()))?;
    let _lock = store.lock(&rel)?;
    let mut entry: Entry = read_file(store, &rel)?;
    if !may_change(&entry, actor) {
        return Err(Error::NotAllowed {
            id: id.to_owned(),
            actor: actor.to_owned(),
            from: entry.from.clone(),
            to: entry.to.clone(),
        });
    }
    check_transition(entry.status, status).map_err(|why| Error::Transition {
        id: id.to_owned(),
        from: entry.status,
        to: status,
        why,
    })?;
    entry.status = status;
    entry.updated_at = next_update(&entry.updated_at, now);
    if note.is_some() {
        entry.note = note;
    }
    let text = encode(&rel, &entry)?;
    store.write_bytes_locked(&rel, text.as_bytes())?;
    Ok(entry)
}

/// Records where entry `id` is kept on GitHub (`source_issue`, and
/// `source_comment_id` when given), under the file's lock and checked like any
/// write. `updated_at` stays: where a copy is kept is no change of the entry, so
/// the copy that is newer still wins when two meet.
pub fn set_source(store: &Store, id: &str, issue: SourceRef, comment: Option<SourceRef>) -> Result<Entry> {
    let rel = find(store, id)?.ok_or_else(|| Error::NotFound(id.to_owned()))?;
    let _lock = store.lock(&rel)?;
    let mut entry: Entry = read_file(store, &rel)?;
    let comment =
        comment.or_else(|| entry.source_comment_id.clone().filter(|_| entry.source_issue.as_ref() == Some(&issue)));
    if entry.source_issue.as_ref() == Some(&issue) && entry.source_comment_id == comment {
        return Ok(entry);
    }
    entry.source_issue = Some(issue);
    entry.source_comment_id = comment;
    let text = encode(&rel, &entry)?;
    store.write_bytes_locked(&rel, text.as_bytes())?;
    Ok(entry)
}

/// Writes `entry` whole over the entry of the same id if it is newer (a later
/// `updated_at`), under the file's lock: true when written, false when the file is
/// as new or newer (nothing written). Refused when the file is in another project:
/// a copy never moves an entry.
pub fn replace(store: &Store, entry: &Entry) -> Result<bool> {
    let id = entry.id.as_str();
    let rel = find(store, id)?.ok_or_else(|| Error::NotFound(id.to_owned()))?;
    let wanted = rel_path(entry.project_id.as_str(), id)?;
    if wanted != rel {
        return Err(Error::BadField {
            field: "project_id",
            value: entry.project_id.to_string(),
            why: format!("differs from the project of entry {id} ({rel}); a copy may not move it"),
        });
    }
    let text = encode(&rel, entry)?;
    let _lock = store.lock(&rel)?;
    let current: Entry = read_file(store, &rel)?;
    if entry.updated_at.instant() <= current.updated_at.instant() {
        return Ok(false);
    }
    store.write_bytes_locked(&rel, text.as_bytes())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tree() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        (dir, store)
    }

    fn entry(id: &str, project: &str, updated: &str) -> Entry {
        let text = format!(
            r#"{{"id": "{id}", "from": "Human", "to": "Aya", "project_id": "{project}", "kind": "k",
                "status": "open", "payload": {{"summary": "s"}}, "target_docs": [],
                "created_at": "2025-11-30T02:30:00+09:00", "updated_at": "{updated}"}}"#
        );
        validate::parse("test", text.as_bytes(), &Default::default()).unwrap()
    }

    #[test]
    fn set_source_records_the_comment_and_leaves_updated_at() {
        let (_d, store) = tree();
        create(&store, &entry("e1", "p", "2025-11-30T02:30:00+09:00")).unwrap();
        let e = set_source(&store, "e1", SourceRef::Number(571), Some(SourceRef::Number(4_300_000_001))).unwrap();
        assert_eq!(
            (e.source_issue, e.source_comment_id),
            (Some(SourceRef::Number(571)), Some(SourceRef::Number(4_300_000_001)))
        );
        let (_, read_back) = read(&store, "e1").unwrap();
        assert_eq!(read_back.updated_at.as_str(), "2025-11-30T02:30:00+09:00");
        assert_eq!(read_back.source_comment_id, Some(SourceRef::Number(4_300_000_001)));
        let same_issue = set_source(&store, "e1", SourceRef::Number(571), None).unwrap();
        assert_eq!(same_issue.source_comment_id, Some(SourceRef::Number(4_300_000_001)), "kept on the same issue");
        let moved = set_source(&store, "e1", SourceRef::Number(9), None).unwrap();
        assert_eq!(moved.source_comment_id, None, "another issue: the old comment id goes");
        assert!(matches!(set_source(&store, "nope", SourceRef::Number(1), None), Err(Error::NotFound(_))));
    }

    #[test]
    fn replace_writes_only_a_newer_copy_of_the_same_project() {
        let (_d, store) = tree();
        create(&store, &entry("e1", "p", "2025-11-30T02:30:00+09:00")).unwrap();
        let mut newer = entry("e1", "p", "2025-11-30T03:00:00+09:00");
        newer.status = EntryStatus::Done;
        assert!(replace(&store, &newer).unwrap());
        assert_eq!(read(&store, "e1").unwrap().1, newer);
        assert!(!replace(&store, &entry("e1", "p", "2025-11-30T02:45:00+09:00")).unwrap(), "older: nothing written");
        assert!(!replace(&store, &newer).unwrap(), "as new: nothing written");
        assert_eq!(read(&store, "e1").unwrap().1.status, EntryStatus::Done);
        let elsewhere = entry("e1", "q", "2025-12-01T00:00:00Z");
        let err = replace(&store, &elsewhere).unwrap_err().to_string();
        assert!(err.contains("project_id") && err.contains("entries/p/e1.json"), "{err}");
        assert!(!store.root().join("entries/q/e1.json").exists());
        assert!(matches!(replace(&store, &entry("e2", "p", "2025-12-01T00:00:00Z")), Err(Error::NotFound(_))));
    }
}
