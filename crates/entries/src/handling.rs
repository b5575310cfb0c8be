//! How this node handles one entry a lane picked, in steps that each leave a
//! durable mark, so that an entry is handled exactly once across a `kill -9`:
//!
//! 1. **claim**: `.clawboard/lanes/{id}.json` created exclusively (with several
//!    nodes, after the claim in the bucket was won; a lost one is recorded too);
//! 2. **begin**: the entry goes `open → in_progress` (by its `to` actor);
//! 3. **run**: the role runs (again after a crash: a run is not a side effect the
//!    daemon can see); its checked output and the full entries it will create, ids
//!    included, are recorded (`ran`);
//! 4. **apply**: documents written, entries created (an id already holding the
//!    same entry is skipped), the handled entry's status set; then `applied`.
//!
//! A step found done is skipped, so replaying the journal after a crash resumes
//! an entry where it stopped.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clawboard_core::formats::{Entry, EntryStatus, SourceRef};
use clawboard_core::{Id, Store, Timestamp, layout};
use serde::{Deserialize, Serialize};

use crate::board;
use crate::error::{Error, Result};
use crate::lanes::{LaneOutput, Pick, doc_path};

/// Where this node stands with one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// This node holds the entry; its role has not finished.
    Claimed,
    /// Another node holds it.
    Lost,
    /// The role finished; its output is recorded, not yet applied.
    Ran,
    /// Handled.
    Applied,
}

/// `.clawboard/lanes/{id}.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handling {
    pub entry: String,
    pub lane: String,
    pub actor: String,
    pub role: String,
    pub state: State,
    pub claimed_at: Timestamp,
    /// The node that holds the entry (with several nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The handled entry's `created_at`: tells the record of an earlier entry
    /// under the same id (deleted since) from this one's (none in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    /// The role's checked output (a failed run is an `error` output with the reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<LaneOutput>,
    /// The entries the output creates, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<Entry>,
    /// Role runs, newest last: one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<String>,
}

impl Handling {
    pub fn new(entry: &Entry, pick: &Pick, state: State, owner: Option<String>) -> Handling {
        Handling {
            entry: entry.id.to_string(),
            lane: pick.lane.clone(),
            actor: pick.actor.clone(),
            role: pick.config.role.clone(),
            state,
            claimed_at: Timestamp::now(),
            owner,
            created_at: Some(entry.created_at.clone()),
            output: None,
            planned: Vec::new(),
            runs: Vec::new(),
        }
    }
}

fn dir(store: &Store) -> PathBuf {
    store.root().join(layout::LANES_STATE)
}

fn checked(id: &str) -> Result<Id> {
    Id::new(id).map_err(|e| Error::BadField { field: "id", value: id.to_owned(), why: e.to_string() })
}

fn name(id: &str) -> Result<String> {
    Ok(format!("{}.json", checked(id)?))
}

impl State {
    /// This node is done with the entry: handled, or held by another node.
    pub fn is_final(self) -> bool {
        matches!(self, State::Applied | State::Lost)
    }
}

/// The record of entry `entry`, if this node has one for it. A finished record
/// of an earlier entry that had the same id (deleted since, by retention or a
/// person, and the id given again) is removed: it would take the new entry for
/// handled.
pub fn load_for(store: &Store, entry: &Entry) -> Result<Option<Handling>> {
    let stale = |h: &Handling| h.state.is_final() && h.created_at.as_ref().is_some_and(|c| *c != entry.created_at);
    // Read without the lock: only a stale record is removed, under it, read again.
    match load(store, entry.id.as_str())? {
        Some(h) if stale(&h) => {}
        found => return Ok(found),
    }
    let _records = board::file_lock(store, RECORDS_LOCK)?;
    let Some(h) = load(store, entry.id.as_str())? else { return Ok(None) };
    if !stale(&h) {
        return Ok(Some(h));
    }
    tracing::info!(entry = %entry.id, state = ?h.state, "lane: a record of an earlier entry with this id removed");
    remove(store, &h.entry)?;
    Ok(None)
}

/// Removes the finished records (handled, or held by another node) of entries
/// that are gone, as retention deletes entries that ended; a record still under
/// way stays, and one that does not read stays too (logged). Returns how many went.
pub fn prune(store: &Store) -> Result<usize> {
    let _records = board::file_lock(store, RECORDS_LOCK)?;
    let mut removed = 0;
    for id in record_ids(store)? {
        let h = match load(store, &id) {
            Ok(Some(h)) => h,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(record = id, "lane record kept: it does not read: {e}");
                continue;
            }
        };
        if h.state.is_final() && board::find(store, &id)?.is_none() {
            remove(store, &id)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Held while a record is checked and removed ([`load_for`], [`prune`]), so that
/// neither removes a record the other has just replaced.
const RECORDS_LOCK: &str = "lane-records.lock";

/// Removes the record of entry `id` and its attempts (`.clawboard/lanes/{id}/`),
/// the attempts first: a crash between leaves the record, removed next time.
fn remove(store: &Store, id: &str) -> Result<()> {
    let attempts = dir(store).join(checked(id)?.as_str());
    let path = dir(store).join(name(id)?);
    let gone = |r: std::io::Result<()>, at: &std::path::Path| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(clawboard_core::Error::io(at, e)),
        _ => Ok(()),
    };
    gone(std::fs::remove_dir_all(&attempts), &attempts)?;
    gone(std::fs::remove_file(&path), &path)?;
    Ok(())
}

/// The ids of this node's records (`.clawboard/lanes/{id}.json`), sorted.
fn record_ids(store: &Store) -> Result<Vec<String>> {
    let d = dir(store);
    let listing = match std::fs::read_dir(&d) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(clawboard_core::Error::io(&d, e).into()),
    };
    let mut ids = Vec::new();
    for item in listing {
        let path = item.map_err(|e| clawboard_core::Error::io(&d, e))?.path();
        // A temp file (`.{id}.json.clawboard-tmp.…`) does not end in `.json`.
        if let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) {
            ids.push(id.to_owned());
        }
    }
    ids.sort();
    Ok(ids)
}

/// The record of entry `id`, if this node has one.
pub fn load(store: &Store, id: &str) -> Result<Option<Handling>> {
    let path = dir(store).join(name(id)?);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            clawboard_core::Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, e)).into()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(clawboard_core::Error::io(&path, e).into()),
    }
}

/// Creates the record; false if one exists (the entry was claimed before).
pub fn claim(store: &Store, h: &Handling) -> Result<bool> {
    let d = dir(store);
    std::fs::create_dir_all(&d).map_err(|e| clawboard_core::Error::io(&d, e))?;
    Ok(clawboard_core::store::create_atomic(&d, &name(&h.entry)?, &encode(h), 0o644)?)
}

/// Replaces the record.
pub fn save(store: &Store, h: &Handling) -> Result<()> {
    Ok(clawboard_core::store::write_atomic(&dir(store), &name(&h.entry)?, &encode(h))?)
}

fn encode(h: &Handling) -> Vec<u8> {
    clawboard_core::store::to_pretty_json(h).into_bytes()
}

/// Step 2: the entry goes `in_progress` if it is still `open`. Returns the entry
/// as it is now (a person may have canceled it meanwhile).
pub fn begin(store: &Store, entry: Entry, pick: &Pick, now: DateTime<Utc>) -> Result<Entry> {
    if entry.status != EntryStatus::Open {
        return Ok(entry);
    }
    match board::set_status(store, entry.id.as_str(), &pick.actor, EntryStatus::InProgress, None, now) {
        Ok(e) => Ok(e),
        // Changed between the read and the lock: take it as it is.
        Err(Error::Transition { .. }) => Ok(board::read(store, entry.id.as_str())?.1),
        Err(e) => Err(e),
    }
}

/// What the role is handed on stdin: the entry, the lane's rules for the actor,
/// and the content of every target doc (null when it does not exist yet). A doc
/// `may_read` refuses (the role's R cells) is named with the rule under `refused`,
/// its content withheld, as is one that is a symbolic link.
pub fn context(
    store: &Store,
    entry: &Entry,
    pick: &Pick,
    may_read: &dyn Fn(&str) -> std::result::Result<(), String>,
) -> serde_json::Value {
    let docs: Vec<serde_json::Value> = entry
        .target_docs
        .iter()
        .map(|t| {
            let Ok(rel) = doc_path(&pick.docs, t.path()) else {
                return serde_json::json!({"path": t.path(), "section": t.section(), "file": null, "content": null});
            };
            let linked = std::fs::symlink_metadata(store.path(&rel)).is_ok_and(|m| m.file_type().is_symlink());
            let decision =
                if linked { Err("a symbolic link: never given to a role".to_owned()) } else { may_read(&rel.to_string()) };
            if let Err(rule) = decision {
                tracing::warn!(entry = %entry.id, role = pick.config.role, file = %rel, %rule, "not in the role's context: its access rules do not let it read the file");
                return serde_json::json!({
                    "path": t.path(), "section": t.section(), "file": rel.to_string(), "content": null, "refused": rule,
                });
            }
            let content = store.read_bytes(&rel).ok().map(|b| String::from_utf8_lossy(&b).into_owned());
            serde_json::json!({"path": t.path(), "section": t.section(), "file": rel.to_string(), "content": content})
        })
        .collect();
    serde_json::json!({
        "lane": pick.lane,
        "actor": pick.actor,
        "allowedKinds": pick.config.allowed_kinds,
        "writesDocs": pick.config.writes_docs,
        "entry": entry,
        "targetDocs": docs,
    })
}

/// The id source of entries made while handling `entry`: its lane and issue (or
/// run), and with several nodes the node's id, so that two nodes never count up
/// the same prefix.
pub fn source(entry: &Entry, lane: &str, node: Option<&str>) -> String {
    let lane = lane.replace('_', "");
    let base = match (&entry.source_issue, &entry.source_run_id) {
        (Some(SourceRef::Number(n)), _) => format!("{lane}-issue{n}"),
        (Some(SourceRef::Text(t)), _) if Id::new(t).is_ok() => format!("{lane}-issue{t}"),
        (_, Some(SourceRef::Number(n))) => format!("{lane}-run{n}"),
        _ => lane,
    };
    match node {
        Some(node) => format!("{base}-{node}"),
        None => base,
    }
}

/// Step 3's plan: the entries `out` creates, whole, with fresh ids (none of them
/// taken, and none in `reserved`, the ids other unapplied plans hold).
pub fn plan(
    store: &Store,
    handled: &Entry,
    pick: &Pick,
    out: &LaneOutput,
    reserved: &[String],
    node: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Vec<Entry>> {
    let now = board::next_update(&Timestamp::from_utc(now), now);
    let src = source(handled, &pick.lane, node);
    let mut planned: Vec<Entry> = Vec::new();
    for e in &out.entries {
        let mut id = board::new_id(store, handled.project_id.as_str(), &src)?;
        while reserved.iter().map(String::as_str).chain(planned.iter().map(|p| p.id.as_str())).any(|r| r == id.as_str())
        {
            id = board::bump(&id)?;
        }
        planned.push(out.new_entry(e, handled, &pick.actor, id, now.clone()));
    }
    for p in &planned {
        board::check(p)?;
    }
    Ok(planned)
}

/// Whether `there`, found under a planned entry's id, is that entry created
/// before a crash: everything its creator set matches (its status, note and
/// `updatedAt` may have moved since). Two replies made in the same second by the
/// same actor differ in what they say. A payload edited between the crash and
/// the replay makes it a stranger: the plan's entry is then created again under a
/// new id, a duplicate rather than a loss.
fn same_entry(there: &Entry, planned: &Entry) -> bool {
    there.from == planned.from
        && there.to == planned.to
        && there.kind == planned.kind
        && there.project_id == planned.project_id
        && there.created_at == planned.created_at
        && there.payload == planned.payload
        && there.target_docs == planned.target_docs
}

/// The ids the plans of this node's `ran` records hold: planned, not yet applied
/// (a crash came between). A handling that starts after a restart keeps clear of
/// them, as it does of the plans made since. An unreadable record is named in
/// the error.
pub fn unapplied(store: &Store) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for id in record_ids(store)? {
        if let Some(h) = load(store, &id)?
            && h.state == State::Ran
        {
            ids.extend(h.planned.iter().map(|p| p.id.to_string()));
        }
    }
    Ok(ids)
}

/// Step 4: writes the documents, creates the planned entries and sets the handled
/// entry's status. Each part is skipped when found done.
pub fn apply(store: &Store, h: &mut Handling, pick: &Pick, node: Option<&str>, now: DateTime<Utc>) -> Result<()> {
    let out = h.output.clone().unwrap_or_default();
    for d in &out.docs {
        let rel = doc_path(&pick.docs, &d.path).map_err(|why| Error::BadField {
            field: "docs.path",
            value: d.path.clone(),
            why,
        })?;
        if store.read_bytes(&rel).ok().as_deref() != Some(d.content.as_bytes()) {
            store.write_bytes(&rel, d.content.as_bytes())?;
        }
    }
    for i in 0..h.planned.len() {
        let p = h.planned[i].clone();
        match board::find(store, p.id.as_str())? {
            None => {
                board::create(store, &p)?;
            }
            Some(_) => {
                let (_, there) = board::read(store, p.id.as_str())?;
                if !same_entry(&there, &p) {
                    // Someone else took the id before it was created: a new one, recorded first.
                    let mut fresh = p.clone();
                    fresh.id = board::new_id(store, p.project_id.as_str(), &source(&p, &h.lane, node))?;
                    h.planned[i] = fresh.clone();
                    save(store, h)?;
                    board::create(store, &fresh)?;
                }
            }
        }
    }
    let (_, current) = board::read(store, &h.entry)?;
    if !current.status.is_final() {
        board::set_status(store, &h.entry, &pick.actor, out.final_status(), out.note.clone(), now)?;
    }
    h.state = State::Applied;
    save(store, h)
}
