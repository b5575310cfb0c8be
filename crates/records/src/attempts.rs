//! Every run of a role is an attempt, recorded in `tasks/{id}/attempts/` (for a
//! lane's entry, `.clawboard/lanes/{id}/attempts/`) before it
//! starts and again when it ends, with its raw stdout and stderr beside it. No role
//! output is ever lost, and an attempt still `running` when a daemon starts was cut
//! short by a crash: it is marked `interrupted`.

use clawboard_core::{Error, RelPath, Store, Timestamp, layout};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptStatus {
    Running,
    /// Ran and printed a valid output.
    Ok,
    Failed,
    TimedOut,
    Interrupted,
}

/// `tasks/{id}/attempts/{NNNN}-{role}.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    pub number: u32,
    /// The lifecycle step: `pm`, `iter-2/creator-code`, `iter-2/validator`, `harvest`.
    pub step: String,
    pub role: String,
    pub instance_id: String,
    pub started_at: Timestamp,
    pub status: AttemptStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// Escalations this attempt raised (ids under `escalations/`): those in its
    /// output first, in their order, then those it wrote through the daemon's API
    /// (`clawboard write escalations/{id}.json`) while it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<String>,
    /// Copied from this task (a fork's recorded step): it ran there, not here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

impl Attempt {
    pub fn file_stem(&self) -> String {
        format!("{:04}-{}", self.number, self.role)
    }
}

pub fn attempts_dir(task_id: &str) -> String {
    layout::task_file(task_id, layout::ATTEMPTS_DIR)
}

/// Where the runs for entry `entry_id` are recorded: beside this node's record of
/// its handling (`.clawboard/lanes/{id}.json`), in `.clawboard/lanes/{id}/attempts/`.
pub fn entry_attempts_dir(entry_id: &str) -> String {
    format!("{}/{entry_id}/{}", layout::LANES_STATE, layout::ATTEMPTS_DIR)
}

fn rel(dir: &str, name: &str) -> Result<RelPath, Error> {
    RelPath::new(&format!("{dir}/{name}"))
}

/// All attempts of a task, by number.
pub fn load(store: &Store, task_id: &str) -> Result<Vec<Attempt>, Error> {
    load_in(store, &attempts_dir(task_id))
}

/// All attempts recorded in `dir`, by number.
pub fn load_in(store: &Store, dir: &str) -> Result<Vec<Attempt>, Error> {
    let mut out = Vec::new();
    for name in store.list_names(dir)? {
        if !name.ends_with(".json") || clawboard_core::store::is_temp_name(&name) {
            continue;
        }
        let bytes = store.read_bytes(&rel(dir, &name)?)?;
        match serde_json::from_slice::<Attempt>(&bytes) {
            Ok(a) => out.push(a),
            Err(err) => tracing::warn!(dir, file = %name, "unreadable attempt record: {err}"),
        }
    }
    out.sort_by_key(|a| a.number);
    Ok(out)
}

/// Records `a` (a record: durable at the store's next `sync_records`).
pub fn save(store: &Store, task_id: &str, a: &Attempt) -> Result<(), Error> {
    save_in(store, &attempts_dir(task_id), a)
}

/// Records `a` in `dir`.
pub fn save_in(store: &Store, dir: &str, a: &Attempt) -> Result<(), Error> {
    store.write_record_json(&rel(dir, &format!("{}.json", a.file_stem()))?, a)
}

/// Keeps a run's raw output beside its record (`.stdout`, `.stderr`; empty ones are skipped).
pub fn save_output(store: &Store, task_id: &str, a: &Attempt, stdout: &[u8], stderr: &[u8]) -> Result<(), Error> {
    save_output_in(store, &attempts_dir(task_id), a, stdout, stderr)
}

/// Keeps a run's raw output beside its record in `dir`.
pub fn save_output_in(store: &Store, dir: &str, a: &Attempt, stdout: &[u8], stderr: &[u8]) -> Result<(), Error> {
    for (ext, bytes) in [("stdout", stdout), ("stderr", stderr)] {
        if !bytes.is_empty() {
            store.write_record(&rel(dir, &format!("{}.{ext}", a.file_stem()))?, bytes)?;
        }
    }
    Ok(())
}

/// Keeps what the run was handed (its input, as `replay` compares it) beside its
/// record in `dir`, as `{NNNN}-{role}.input`: written with the record, durable at
/// the store's next `sync_records`.
pub fn save_input_in(store: &Store, dir: &str, a: &Attempt, input: &serde_json::Value) -> Result<(), Error> {
    let bytes = clawboard_core::store::to_pretty_json(input);
    store.write_record(&rel(dir, &format!("{}.input", a.file_stem()))?, bytes.as_bytes())
}

/// What attempt `a` was handed, when it was kept (`None` for a run recorded before
/// inputs were kept, or one a crash cut short before it).
pub fn read_input_in(store: &Store, dir: &str, a: &Attempt) -> Result<Option<serde_json::Value>, Error> {
    match store.read_bytes(&rel(dir, &format!("{}.input", a.file_stem()))?) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            let path = format!("{dir}/{}.input", a.file_stem());
            Error::io(path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }),
        Err(Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The raw stderr of attempt `a` (empty when it printed none).
pub fn read_stderr_in(store: &Store, dir: &str, a: &Attempt) -> Result<Vec<u8>, Error> {
    match store.read_bytes(&rel(dir, &format!("{}.stderr", a.file_stem()))?) {
        Err(Error::NotFound { .. }) => Ok(Vec::new()),
        other => other,
    }
}

pub fn read_stdout(store: &Store, task_id: &str, a: &Attempt) -> Result<Vec<u8>, Error> {
    read_stdout_in(store, &attempts_dir(task_id), a)
}

/// The stdout kept beside `a`'s record in `dir` (empty when none was kept).
pub fn read_stdout_in(store: &Store, dir: &str, a: &Attempt) -> Result<Vec<u8>, Error> {
    match store.read_bytes(&rel(dir, &format!("{}.stdout", a.file_stem()))?) {
        Err(Error::NotFound { .. }) => Ok(Vec::new()),
        other => other,
    }
}

/// The last `n` bytes of `bytes`, as text.
pub fn tail(bytes: &[u8], n: usize) -> String {
    let start = bytes.len().saturating_sub(n);
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}
