//! Intake: a `*.json` dropped into `inbox/`, or a `task.json` written straight to
//! `tasks/{id}/`, is validated and becomes a claimed task. An invalid or duplicate
//! one moves to `inbox/rejected/` with `NAME.error.txt` beside it naming the field
//! and the reason.
//!
//! An inbox file is first renamed into `.clawboard/intake/{id}@{name}` (the id is
//! fixed from then on), then the task is created and claimed, then the staged file
//! is removed. Each step is idempotent, so a crash anywhere loses nothing and never
//! creates a task twice.

use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;

use clawboard_blueprint::Catalog;
use clawboard_blueprint::contract::Input;
use clawboard_core::formats::{Task, TaskStatus, TaskSubmission};
use clawboard_core::validate::{self, read_tree_file};
use clawboard_core::{Error, Id, Invalid, PathContext, RelPath, Store, Timestamp, layout};

use crate::claims;

/// What intake did with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intake {
    /// A new task, claimed by this node.
    Accepted(String),
    /// Moved to `inbox/rejected/{file}`.
    Rejected { file: String, reason: String },
    /// Nothing to do (gone already, claimed already, not pending …).
    Ignored(&'static str),
    /// Empty or cut short, and written less than [`SETTLE`] ago: perhaps still being
    /// written in pieces. Left alone; take it again on its next close or once quiet.
    Unsettled,
    /// Taken out of `inbox/` into `.clawboard/intake/`, its task not made: an
    /// error interrupted its batch (reported with another file of the batch).
    /// [`recover_staged`] finishes it.
    Staged,
}

/// How long a file that is empty or whose JSON ends too early must have been left
/// alone before it is rejected: a writer that closes between pieces
/// (`printf … > f; printf … >> f`) is given this long to finish.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// True if `bytes` look like a file still being written: nothing yet, or JSON that
/// ends before its last bracket, and the file was written less than [`SETTLE`] ago.
fn unsettled(path: &std::path::Path, bytes: &[u8]) -> bool {
    let cut_short = bytes.iter().all(u8::is_ascii_whitespace)
        || serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err_and(|e| e.is_eof());
    cut_short
        && fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| clawboard_core::store::modified_within(t, SETTLE))
}

/// `inbox/{name}`, as it is shown in messages.
fn inbox_file(name: &str) -> String {
    format!("{}/{name}", layout::INBOX)
}

fn staging_dir(store: &Store) -> Result<PathBuf, Error> {
    let d = store.root().join(layout::INTAKE);
    fs::create_dir_all(&d).map_err(|e| Error::Io { path: d.clone(), source: e })?;
    Ok(d)
}

fn render(problems: &Invalid) -> String {
    let mut s = problems.to_string();
    s.push('\n');
    s
}

/// Why a task's blueprint input (seed 001) is refused, if the task has one and it is.
fn blueprint_refusal(file: &str, extra: &clawboard_core::formats::Extra, blueprints: &Catalog) -> Option<String> {
    match Input::from_task_extra(file, extra, &blueprints.ids()) {
        Ok(_) => None,
        Err(e) => {
            // A built-in that cannot run here says why, not just "unknown".
            let id = extra.get("blueprint_id").and_then(serde_json::Value::as_str).unwrap_or_default();
            match blueprints.unavailable.get(id) {
                Some(why) => Some(format!("{file}: /blueprint_id: blueprint {id:?} cannot run here: {why}\n")),
                None => Some(format!("{e}\n")),
            }
        }
    }
}

/// Takes `inbox/{name}`; a blueprint task's input is checked against `blueprints`.
pub fn take_inbox_file(store: &Store, name: &str, blueprints: &Catalog) -> Result<Intake, Error> {
    take_inbox_files(store, &[name.to_owned()], blueprints).pop().unwrap_or(Ok(Intake::Ignored("gone before intake")))
}

/// Takes the dropped files `inbox/{name}` of `names`, each as [`take_inbox_file`]
/// describes, with the syncs shared by the batch: every file is renamed into
/// `.clawboard/intake/` and the directory synced once; every `task.json` is
/// appended to the write-ahead log and the log synced once; the claims are made
/// with one sync per directory ([`claims::claim_all`]); then the staged files are
/// removed. A burst of drops costs four syncs, not seven per file.
///
/// One outcome per name, in order. When a shared step fails (a full disk), the
/// first staged file's outcome is the error and the others' [`Intake::Staged`]:
/// they wait in `.clawboard/intake/` for [`recover_staged`].
pub fn take_inbox_files(store: &Store, names: &[String], blueprints: &Catalog) -> Vec<Result<Intake, Error>> {
    let mut outcomes: Vec<Result<Intake, Error>> = Vec::with_capacity(names.len());
    let mut staged = Vec::new();
    let mut ids = HashSet::new();
    for name in names {
        match stage(store, name, blueprints, &mut ids) {
            Ok(Staging::Staged(s)) => {
                staged.push((outcomes.len(), s));
                outcomes.push(Ok(Intake::Ignored("staged")));
            }
            Ok(Staging::Done(o)) => outcomes.push(Ok(o)),
            Err(e) => outcomes.push(Err(e)),
        }
    }
    let places: Vec<usize> = staged.iter().map(|(i, _)| *i).collect();
    let finished = match places.is_empty() {
        true => Ok(Vec::new()),
        false => staging_dir(store).and_then(|d| sync_dir(&d)).and_then(|()| finish_all(store, staged)),
    };
    match finished {
        Ok(done) => {
            for (i, outcome) in done {
                outcomes[i] = outcome;
            }
        }
        Err(e) => {
            let mut first = Some(e);
            for i in places {
                outcomes[i] = first.take().map_or(Ok(Intake::Staged), Err);
            }
        }
    }
    outcomes
}

/// A dropped file renamed into `.clawboard/intake/` as `{id}@{name}`: its task
/// is fixed, not yet written.
struct Staged {
    name: String,
    path: PathBuf,
    task: Task,
}

enum Staging {
    Staged(Box<Staged>),
    /// Rejected, or left alone.
    Done(Intake),
}

/// Reads, checks and stages `inbox/{name}` (not synced: see [`take_inbox_files`]).
/// `taken`: the ids staged before it in the batch, which it may not reuse.
fn stage(store: &Store, name: &str, blueprints: &Catalog, taken: &mut HashSet<Id>) -> Result<Staging, Error> {
    let rel = RelPath::new(&inbox_file(name))?;
    let path = store.path(&rel);
    let bytes = match read_tree_file(&path, store.max_file_bytes()) {
        Err(Error::NotFound { .. }) => return Ok(Staging::Done(Intake::Ignored("gone before intake"))),
        // Too large, a symbolic link, a FIFO: refused without being read.
        Err(Error::Invalid(mut refused)) => {
            refused.file = inbox_file(name);
            return reject(store, path, name, &render(&refused)).map(Staging::Done);
        }
        Err(e) => return Err(e),
        Ok(b) => b,
    };
    if unsettled(&path, &bytes) {
        return Ok(Staging::Done(Intake::Unsettled));
    }
    let submission: TaskSubmission = match validate::parse(&inbox_file(name), &bytes, &PathContext::default()) {
        Ok(s) => s,
        Err(Error::Invalid(inv)) => return reject(store, path, name, &render(&inv)).map(Staging::Done),
        Err(e) => return Err(e),
    };
    if let Some(why) = blueprint_refusal(&inbox_file(name), &submission.extra, blueprints) {
        return reject(store, path, name, &why).map(Staging::Done);
    }
    let id = submission.task_id.clone().unwrap_or_else(clawboard_core::id::new_task_id);
    if let Some(why) = duplicate(store, &id, name, taken) {
        return reject(store, path, name, &why).map(Staging::Done);
    }
    let staged = staging_dir(store)?.join(format!("{id}@{name}"));
    match fs::rename(&path, &staged) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Staging::Done(Intake::Ignored("gone before intake")));
        }
        Err(e) => return Err(Error::Io { path, source: e }),
    }
    taken.insert(id.clone());
    let task = submission.into_task(id, Timestamp::now(), "human");
    Ok(Staging::Staged(Box::new(Staged { name: name.to_owned(), path: staged, task })))
}

/// Why `id` cannot be the task of `inbox/{name}`: it exists, is claimed, or was
/// `taken` by a file before it in the same batch.
fn duplicate(store: &Store, id: &Id, name: &str, taken: &HashSet<Id>) -> Option<String> {
    let existing = store.path(&RelPath::new(&layout::task_file(id.as_str(), layout::TASK_FILE)).ok()?);
    (taken.contains(id) || existing.exists() || claims::is_claimed(store, id.as_str())).then(|| {
        format!(
            "{}: /taskId: task {:?} already exists ({}); remove taskId to get a new one\n",
            inbox_file(name),
            id.as_str(),
            layout::task_file(id.as_str(), layout::TASK_FILE)
        )
    })
}

/// A file's outcome by its place in its batch.
type Placed = (usize, Result<Intake, Error>);

/// Makes the tasks of staged files and claims them: each `task.json` appended to
/// the write-ahead log, one sync of the log, the files written, the claims
/// ([`claims::claim_all`]), then the staged files removed. The outcomes by the files' places in the batch.
fn finish_all(store: &Store, staged: Vec<(usize, Box<Staged>)>) -> Result<Vec<Placed>, Error> {
    let mut out = Vec::with_capacity(staged.len());
    let mut made = Vec::with_capacity(staged.len());
    for (i, s) in staged {
        match create_task(store, &s) {
            Ok(None) => made.push((i, s)),
            Ok(Some(rejected)) => out.push((i, Ok(rejected))),
            Err(e) => out.push((i, Err(e))),
        }
    }
    store.sync_records()?;
    // On disk before the task is claimed and driven: its roles, other processes,
    // read `task.json` as a file (the writer thread writes it now, without a sync).
    store.settle();
    let ids: Vec<&str> = made.iter().map(|(_, s)| s.task.task_id.as_str()).collect();
    claims::claim_all(store, &ids)?;
    for (i, s) in made {
        let id = s.task.task_id.to_string();
        out.push((
            i,
            remove(&s.path).map(|()| {
                tracing::info!(task = %id, file = %inbox_file(&s.name), "accepted a new task");
                Intake::Accepted(id)
            }),
        ));
    }
    Ok(out)
}

/// Writes a staged file's `task.json` (a record: durable at the next
/// [`Store::sync_records`]). `Some`: not made, the file rejected.
fn create_task(store: &Store, s: &Staged) -> Result<Option<Intake>, Error> {
    let id = s.task.task_id.as_str();
    let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE))?;
    let bytes = clawboard_core::store::to_pretty_json(&s.task);
    match store.create_record(&rel, bytes.as_bytes()) {
        Ok(()) => return Ok(None),
        Err(Error::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
    // Made by us before a crash: the same task, or empty if the crash (a power
    // loss) came before its sync. Or a real duplicate.
    if store.read_bytes(&rel).is_ok_and(|b| b.is_empty()) {
        store.write_record(&rel, bytes.as_bytes())?;
        return Ok(None);
    }
    let ours = store.read::<Task>(&rel).is_ok_and(|t| t.kind == s.task.kind && t.description == s.task.description);
    if !ours || claims::is_claimed(store, id) && !claims::active(store)?.iter().any(|a| a == id) {
        let why = format!(
            "{}: /taskId: task {id:?} already exists ({})\n",
            inbox_file(&s.name),
            layout::task_file(id, layout::TASK_FILE)
        );
        return reject(store, s.path.clone(), &s.name, &why).map(Some);
    }
    Ok(None)
}

/// Finishes intakes a crash or an error interrupted (files left in
/// `.clawboard/intake/`), as [`take_inbox_files`] finishes a batch. One outcome
/// per file; `Err` as a whole when a shared step fails.
pub fn recover_staged(store: &Store) -> Result<Vec<Result<Intake, Error>>, Error> {
    let dir = staging_dir(store)?;
    let mut out = Vec::new();
    let mut staged = Vec::new();
    for e in fs::read_dir(&dir).map_err(|e| Error::Io { path: dir.clone(), source: e })?.filter_map(Result::ok) {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some((id, name)) = file.split_once('@') else { continue };
        let (Ok(id), path) = (Id::new(id), e.path()) else { continue };
        let bytes = fs::read(&path).map_err(|e| Error::Io { path: path.clone(), source: e })?;
        match validate::parse::<TaskSubmission>(&inbox_file(name), &bytes, &PathContext::default()) {
            Ok(sub) => {
                let task = sub.into_task(id, Timestamp::now(), "human");
                staged.push((staged.len(), Box::new(Staged { name: name.to_owned(), path, task })));
            }
            Err(Error::Invalid(inv)) => out.push(reject(store, path, name, &render(&inv))),
            Err(e) => return Err(e),
        }
    }
    if !staged.is_empty() {
        out.extend(finish_all(store, staged)?.into_iter().map(|(_, o)| o));
    }
    Ok(out)
}

/// Takes `tasks/{id}/task.json` written by someone other than this daemon.
pub fn take_task_file(store: &Store, task_id: &str, blueprints: &Catalog) -> Result<Intake, Error> {
    if claims::is_claimed(store, task_id) {
        return Ok(Intake::Ignored("already claimed"));
    }
    let rel = RelPath::new(&layout::task_file(task_id, layout::TASK_FILE))?;
    let ctx = PathContext { task_dir: Some(task_id.to_owned()), ..PathContext::default() };
    let bytes = match store.read_bytes(&rel) {
        Err(Error::NotFound { .. }) => return Ok(Intake::Ignored("gone before intake")),
        Err(Error::Invalid(inv)) => {
            return reject_in_place(store, task_id, &render(&inv));
        }
        other => other?,
    };
    if unsettled(&store.path(&rel), &bytes) {
        return Ok(Intake::Unsettled);
    }
    let shown = rel.to_string();
    let task = match validate::parse::<Task>(&shown, &bytes, &ctx) {
        Ok(t) if t.status != TaskStatus::Pending => return Ok(Intake::Ignored("not pending")),
        Ok(t) => t,
        Err(Error::Invalid(_)) => match validate::parse::<TaskSubmission>(&shown, &bytes, &ctx) {
            // A submission written in place: complete it.
            Ok(sub) if sub.task_id.as_ref().is_none_or(|t| t.as_str() == task_id) => {
                let Ok(id) = Id::new(task_id) else { return Ok(Intake::Ignored("not a task directory")) };
                let task = sub.into_task(id, Timestamp::now(), "human");
                store.write_json(&rel, &task)?;
                task
            }
            Ok(sub) => {
                let claimed = sub.task_id.as_ref().map(|t| t.as_str().to_owned()).unwrap_or_default();
                let why = format!(
                    "{shown}: /taskId: {claimed:?} is not the task of its directory {tasks}/{task_id}/; write it to {tasks}/{claimed}/ or drop it in {inbox}/\n",
                    tasks = layout::TASKS,
                    inbox = layout::INBOX,
                );
                return reject_in_place(store, task_id, &why);
            }
            Err(Error::Invalid(inv)) => {
                return reject_in_place(store, task_id, &render(&inv));
            }
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    };
    if let Some(why) = blueprint_refusal(&shown, &task.extra, blueprints) {
        return reject_in_place(store, task_id, &why);
    }
    if !claims::claim(store, task.task_id.as_str())? {
        return Ok(Intake::Ignored("already claimed"));
    }
    tracing::info!(task = %task.task_id, "accepted a task written to {}/", layout::TASKS);
    Ok(Intake::Accepted(task.task_id.to_string()))
}

/// Takes `tasks/{id}/task.json` pulled from another node: a pending task is claimed
/// locally (the daemon then claims it in the bucket, and usually loses to the node
/// it was dropped on); anything else is left alone. A pulled file is never
/// rewritten or rejected here: it is the other node's.
pub fn take_pulled_task(store: &Store, task_id: &str) -> Result<Intake, Error> {
    if claims::is_claimed(store, task_id) {
        return Ok(Intake::Ignored("already claimed"));
    }
    let rel = RelPath::new(&layout::task_file(task_id, layout::TASK_FILE))?;
    let task: Task = match store.read(&rel) {
        Ok(t) => t,
        Err(Error::NotFound { .. }) => return Ok(Intake::Ignored("gone before intake")),
        Err(e) => {
            tracing::warn!(task = task_id, "a pulled task.json cannot be read; left to its node: {e}");
            return Ok(Intake::Ignored("unreadable pulled task"));
        }
    };
    if task.status != TaskStatus::Pending {
        return Ok(Intake::Ignored("not pending"));
    }
    if !claims::claim(store, task_id)? {
        return Ok(Intake::Ignored("already claimed"));
    }
    Ok(Intake::Accepted(task_id.to_owned()))
}

/// Rejects `tasks/{id}/task.json`, and removes `tasks/{id}/` if that leaves it empty:
/// no task was made, so no directory should be left to look like one.
fn reject_in_place(store: &Store, task_id: &str, reason: &str) -> Result<Intake, Error> {
    let rel = RelPath::new(&layout::task_file(task_id, layout::TASK_FILE))?;
    let out = reject(store, store.path(&rel), &format!("{task_id}.task.json"), reason)?;
    if let Some(dir) = store.path(&rel).parent() {
        match fs::remove_dir(dir) {
            Ok(()) => {}
            // Not empty (the writer put more there), or gone: leave it.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::NotFound) => {}
            Err(e) => return Err(Error::Io { path: dir.to_owned(), source: e }),
        }
    }
    Ok(out)
}

/// Moves `src` to `inbox/rejected/` (a free name based on `name`) with `.error.txt` beside it.
fn reject(store: &Store, src: PathBuf, name: &str, reason: &str) -> Result<Intake, Error> {
    let mut dest = name.to_owned();
    if store.exists(&RelPath::new(&format!("{}/{dest}", layout::REJECTED))?) {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
        dest = match name.rsplit_once('.') {
            Some((stem, ext)) => format!("{stem}-{stamp}.{ext}"),
            None => format!("{name}-{stamp}"),
        };
    }
    let error_rel = RelPath::new(&format!("{}/{dest}.error.txt", layout::REJECTED))?;
    store.write_bytes(&error_rel, reason.as_bytes())?;
    let dest_rel = RelPath::new(&format!("{}/{dest}", layout::REJECTED))?;
    let dest_path = store.path(&dest_rel);
    match fs::rename(&src, &dest_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Intake::Ignored("gone before intake")),
        Err(e) => return Err(Error::Io { path: src, source: e }),
    }
    if let Some(parent) = dest_path.parent() {
        sync_dir(parent)?;
    }
    tracing::warn!(file = %name, "rejected: {}", reason.trim_end());
    Ok(Intake::Rejected { file: dest, reason: reason.trim_end().to_owned() })
}

fn remove(path: &std::path::Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io { path: path.to_owned(), source: e }),
    }
}

fn sync_dir(dir: &std::path::Path) -> Result<(), Error> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::Io { path: dir.to_owned(), source: e })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let (s, _) = Store::init(d.path()).unwrap();
        (d, s)
    }

    #[test]
    fn a_dropped_task_is_accepted_once() {
        let (d, store) = tree();
        fs::write(d.path().join("inbox/a.json"), r#"{"taskId":"t-a","type":"coding","description":"x"}"#).unwrap();
        assert_eq!(take_inbox_file(&store, "a.json", &Catalog::default()).unwrap(), Intake::Accepted("t-a".into()));
        assert!(!d.path().join("inbox/a.json").exists());
        assert!(claims::is_claimed(&store, "t-a"));
        fs::write(d.path().join("inbox/b.json"), r#"{"taskId":"t-a","type":"coding","description":"y"}"#).unwrap();
        match take_inbox_file(&store, "b.json", &Catalog::default()).unwrap() {
            Intake::Rejected { file, reason } => {
                assert_eq!(file, "b.json");
                assert!(reason.contains("/taskId: task \"t-a\" already exists"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(d.path().join("inbox/rejected/b.json.error.txt").exists());
    }

    #[test]
    fn invalid_files_are_rejected_with_the_field() {
        let (d, store) = tree();
        fs::write(d.path().join("inbox/bad.json"), r#"{"type":"coding","description":"x","priority":"urgent"}"#)
            .unwrap();
        let Intake::Rejected { reason, .. } = take_inbox_file(&store, "bad.json", &Catalog::default()).unwrap() else {
            panic!()
        };
        assert_eq!(reason, "inbox/bad.json: /priority: \"urgent\" is not one of high, normal, low");
        let txt = fs::read_to_string(d.path().join("inbox/rejected/bad.json.error.txt")).unwrap();
        assert_eq!(txt.trim_end(), reason);
        // The same name again gets a new name in rejected/.
        fs::write(d.path().join("inbox/bad.json"), "{]").unwrap();
        let Intake::Rejected { file, .. } = take_inbox_file(&store, "bad.json", &Catalog::default()).unwrap() else {
            panic!()
        };
        assert_ne!(file, "bad.json");
    }

    #[test]
    fn a_link_or_a_fifo_in_the_inbox_is_refused_unread() {
        let (d, store) = tree();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("task.json");
        fs::write(&target, r#"{"taskId":"stolen","type":"coding","description":"outside"}"#).unwrap();
        std::os::unix::fs::symlink(&target, d.path().join("inbox/link.json")).unwrap();
        let Intake::Rejected { reason, .. } = take_inbox_file(&store, "link.json", &Catalog::default()).unwrap() else {
            panic!()
        };
        assert!(reason.starts_with("inbox/link.json: /: the file is a symbolic link;"), "{reason}");
        assert!(!d.path().join("tasks/stolen").exists());
        assert!(fs::symlink_metadata(d.path().join("inbox/rejected/link.json")).unwrap().file_type().is_symlink());
        assert!(target.exists(), "the link moved, not what it points to");
        let fifo = d.path().join("inbox/pipe.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // Would block forever if opened for reading without a writer.
        let Intake::Rejected { reason, .. } = take_inbox_file(&store, "pipe.json", &Catalog::default()).unwrap() else {
            panic!()
        };
        assert!(reason.contains("/: the file is a FIFO (named pipe), not a regular file"), "{reason}");
    }

    #[test]
    fn a_crash_after_staging_is_finished_on_recovery() {
        let (d, store) = tree();
        let staged = d.path().join(".clawboard/intake");
        fs::create_dir_all(&staged).unwrap();
        fs::write(staged.join("t-s@s.json"), r#"{"type":"quant","description":"staged"}"#).unwrap();
        assert_eq!(recovered(&store), vec![Intake::Accepted("t-s".into())]);
        assert!(d.path().join("tasks/t-s/task.json").exists());
        assert!(fs::read_dir(&staged).unwrap().next().is_none());
    }

    fn recovered(store: &Store) -> Vec<Intake> {
        let mut v: Vec<Intake> = recover_staged(store).unwrap().into_iter().map(Result::unwrap).collect();
        v.sort_by_key(|i| format!("{i:?}"));
        v
    }

    fn task_at(store: &Store, id: &str) -> Task {
        store.read(&RelPath::new(&layout::task_file(id, layout::TASK_FILE)).unwrap()).unwrap()
    }

    /// A power loss before the batch's syncs may leave a `task.json` empty beside
    /// its staged file: recovery writes it again rather than calling it a duplicate.
    #[test]
    fn a_task_file_a_power_loss_left_empty_is_written_again_on_recovery() {
        let (d, store) = tree();
        let staged = d.path().join(".clawboard/intake");
        fs::create_dir_all(&staged).unwrap();
        fs::write(staged.join("t-e@e.json"), r#"{"type":"coding","description":"cut"}"#).unwrap();
        fs::create_dir_all(d.path().join("tasks/t-e")).unwrap();
        fs::write(d.path().join("tasks/t-e/task.json"), "").unwrap();
        assert_eq!(recovered(&store), vec![Intake::Accepted("t-e".into())]);
        assert_eq!(task_at(&store, "t-e").description, "cut");
        assert_eq!(claims::active(&store).unwrap(), ["t-e"]);
    }

    /// Files dropped together are taken as one batch: each valid one accepted,
    /// in order; one naming a taskId an earlier file of the batch took, a bad
    /// one, rejected; one cut short left alone; one gone, ignored. The accepted
    /// are claimed and active and nothing is left staged. With deferred writes
    /// (the daemon's store: `task.json` a record in the log) and without.
    #[rstest::rstest]
    fn a_batch_of_drops_is_taken_with_shared_syncs(#[values(false, true)] deferred: bool) {
        let (d, store) = tree();
        let store = if deferred { store.with_deferred_writes().unwrap() } else { store };
        let inbox = d.path().join("inbox");
        for (name, body) in [
            ("a", r#"{"taskId":"t-a","type":"coding","description":"a"}"#),
            ("b", r#"{"taskId":"t-a","type":"coding","description":"b"}"#),
            ("c", r#"{"type":"coding","description":"c","priority":"urgent"}"#),
            ("d", r#"{"taskId":"t-d","type":"cod"#),
            ("e", r#"{"taskId":"t-e","type":"writing","description":"e"}"#),
        ] {
            fs::write(inbox.join(format!("{name}.json")), body).unwrap();
        }
        let names: Vec<String> = ["a", "b", "c", "d", "e", "gone"].iter().map(|n| format!("{n}.json")).collect();
        let out: Vec<Intake> =
            take_inbox_files(&store, &names, &Catalog::default()).into_iter().map(Result::unwrap).collect();
        assert_eq!(out[0], Intake::Accepted("t-a".into()));
        assert!(
            matches!(&out[1], Intake::Rejected { reason, .. } if reason.contains("/taskId: task \"t-a\" already exists")),
            "{:?}",
            out[1]
        );
        assert!(matches!(&out[2], Intake::Rejected { reason, .. } if reason.contains("/priority")), "{:?}", out[2]);
        assert_eq!(out[3], Intake::Unsettled);
        assert_eq!(out[4], Intake::Accepted("t-e".into()));
        assert_eq!(out[5], Intake::Ignored("gone before intake"));
        assert_eq!(claims::active(&store).unwrap(), ["t-a", "t-e"]);
        assert_eq!(task_at(&store, "t-a").description, "a");
        assert!(inbox.join("d.json").exists(), "the file cut short stays in inbox/");
        assert!(fs::read_dir(d.path().join(".clawboard/intake")).unwrap().next().is_none());
        let on_disk: Task = serde_json::from_slice(&fs::read(d.path().join("tasks/t-e/task.json")).unwrap()).unwrap();
        assert_eq!(on_disk.description, "e", "on disk for roles and other processes once taken");
    }

    /// A shared step of a batch that fails (the claims' directory cannot be
    /// made; a full disk in life) stops the batch: the first staged file reports
    /// the error, the others are `Staged`, and all wait in `.clawboard/intake/`.
    /// Recovery finishes them once the cause is gone, each task made once.
    #[test]
    fn an_interrupted_batch_waits_staged_and_recovery_finishes_it() {
        let (d, store) = tree();
        let store = store.with_deferred_writes().unwrap();
        let claims_dir = d.path().join(layout::CLAIMS);
        let _ = fs::remove_dir_all(&claims_dir);
        fs::write(&claims_dir, "in the way").unwrap();
        for n in ["a", "b"] {
            let body = format!(r#"{{"taskId":"t-{n}","type":"coding","description":"{n}"}}"#);
            fs::write(d.path().join(format!("inbox/{n}.json")), body).unwrap();
        }
        let out = take_inbox_files(&store, &["a.json".into(), "b.json".into()], &Catalog::default());
        assert!(out[0].is_err(), "{:?}", out[0]);
        assert_eq!(out[1].as_ref().unwrap(), &Intake::Staged);
        assert_eq!(fs::read_dir(d.path().join(".clawboard/intake")).unwrap().count(), 2);
        assert!(claims::active(&store).unwrap().is_empty());
        fs::remove_file(&claims_dir).unwrap();
        assert_eq!(recovered(&store), vec![Intake::Accepted("t-a".into()), Intake::Accepted("t-b".into())]);
        assert_eq!(claims::active(&store).unwrap(), ["t-a", "t-b"]);
        assert_eq!(task_at(&store, "t-b").description, "b");
        assert!(fs::read_dir(d.path().join(".clawboard/intake")).unwrap().next().is_none());
    }

    #[test]
    fn a_task_written_in_place_is_completed_and_claimed() {
        let (d, store) = tree();
        fs::create_dir_all(d.path().join("tasks/t-p")).unwrap();
        fs::write(d.path().join("tasks/t-p/task.json"), r#"{"type":"writing","description":"in place"}"#).unwrap();
        assert_eq!(take_task_file(&store, "t-p", &Catalog::default()).unwrap(), Intake::Accepted("t-p".into()));
        let t: Task = store.read(&RelPath::new("tasks/t-p/task.json").unwrap()).unwrap();
        assert_eq!(t.status, TaskStatus::Pending);
        assert_eq!(take_task_file(&store, "t-p", &Catalog::default()).unwrap(), Intake::Ignored("already claimed"));
    }

    fn age(path: &std::path::Path, secs: u64) {
        let f = fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs)).unwrap();
    }

    #[test]
    fn a_file_cut_short_waits_while_fresh_and_is_rejected_once_quiet() {
        let (d, store) = tree();
        let inbox = d.path().join("inbox/slow.json");
        for partial in ["", "  \n", r#"{"type":"coding","#, r#"{"type":"coding","description":"x"#] {
            fs::write(&inbox, partial).unwrap();
            assert_eq!(
                take_inbox_file(&store, "slow.json", &Catalog::default()).unwrap(),
                Intake::Unsettled,
                "{partial:?}"
            );
        }
        assert!(inbox.exists(), "left where it is");
        // Complete and valid JSON is never waited for, fresh or not: a bad field is final.
        fs::write(&inbox, r#"{"type":"coding","description":"x","priority":"urgent"}"#).unwrap();
        assert!(matches!(take_inbox_file(&store, "slow.json", &Catalog::default()).unwrap(), Intake::Rejected { .. }));
        fs::write(&inbox, r#"{"type":"coding","description":"x"#).unwrap();
        age(&inbox, 3);
        let Intake::Rejected { reason, .. } = take_inbox_file(&store, "slow.json", &Catalog::default()).unwrap() else {
            panic!()
        };
        assert!(reason.contains("ends too early"), "{reason}");

        let dir = d.path().join("tasks/t-slow");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("task.json"), r#"{"taskId":"t-slow","#).unwrap();
        assert_eq!(take_task_file(&store, "t-slow", &Catalog::default()).unwrap(), Intake::Unsettled);
        age(&dir.join("task.json"), 3);
        assert!(matches!(take_task_file(&store, "t-slow", &Catalog::default()).unwrap(), Intake::Rejected { .. }));
        assert!(!dir.exists(), "the empty directory the writer made is gone with its file");
        assert!(d.path().join("inbox/rejected/t-slow.task.json").exists());
        // A directory with something else in it stays.
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("notes.md"), "mine").unwrap();
        fs::write(dir.join("task.json"), "{").unwrap();
        age(&dir.join("task.json"), 3);
        assert!(matches!(take_task_file(&store, "t-slow", &Catalog::default()).unwrap(), Intake::Rejected { .. }));
        assert!(dir.join("notes.md").exists());
    }
}
