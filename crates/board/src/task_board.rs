//! A task's board on disk, and its history (seed 000, 版本追踪).
//!
//! - `tasks/{id}/board/history/{seq:010}.json`: one record per write, created
//!   once and never changed: sequence number, time, actor (role and instance),
//!   component type, operation, path and value.
//! - `tasks/{id}/board/board.json`: what the history folds to, with the `seq` of
//!   the last record it includes.
//!
//! A write takes the board's lock, checks the caller against the zone table and the
//! value against the seed's types, writes its record (atomically), then the new
//! `board.json`, and only then is acknowledged. A crash after the record and before
//! `board.json` loses nothing: opening the board folds in every record past the
//! snapshot's `seq`. A crash before the record leaves no trace of the write.

use std::sync::Arc;

use clawboard_core::acl::{Acl, Component};
use clawboard_core::formats::{BoardFile, Zone};
use clawboard_core::{Id, RelPath, Store, Timestamp, layout};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::ops::{self, DEFAULT_MAX_VALUE_BYTES, ErrorEntry, Op, OpName};
use crate::path::BoardPath;

/// The board's directory inside a task.
pub const BOARD_DIR: &str = "board";
pub const BOARD_FILE: &str = "board.json";
pub const HISTORY_DIR: &str = "history";

/// Who is calling, and as what component type (from its instance token for a role).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// A role id, or `human` / `daemon`.
    pub role: String,
    pub instance: Option<String>,
    pub component: Component,
    /// How the component type was decided (shown when a request is refused).
    pub how: String,
}

impl Caller {
    /// A person (the CLI without a token): may do anything.
    pub fn human() -> Caller {
        Caller { role: "human".into(), instance: None, component: Component::Orchestrator, how: "a human".into() }
    }

    /// The daemon itself (the lifecycle): the orchestrator, may do anything.
    pub fn daemon() -> Caller {
        Caller {
            role: "daemon".into(),
            instance: None,
            component: Component::Orchestrator,
            how: "the daemon (orchestrator)".into(),
        }
    }

    /// A running role instance of component type `component` (`how`: why that type).
    pub fn role(role: &str, instance: &str, component: Component, how: impl Into<String>) -> Caller {
        Caller { role: role.into(), instance: Some(instance.into()), component, how: how.into() }
    }

    /// A person or the daemon itself; a role instance never is, whatever its id.
    fn is_builtin(&self) -> bool {
        self.instance.is_none() && (self.role == "human" || self.role == "daemon")
    }

    /// The component type recorded in the history: `human` for a person.
    fn recorded_component(&self) -> String {
        if self.role == "human" { "human".into() } else { self.component.name().into() }
    }
}

/// The actor of a write, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// One history record: `tasks/{id}/board/history/{seq:010}.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub seq: u64,
    pub at: Timestamp,
    pub actor: Actor,
    /// `orchestrator`, `worker`, `skill`, `middleware`, or `human`.
    pub component: String,
    pub op: OpName,
    pub path: String,
    pub value: Value,
}

impl Record {
    /// The op this record made (its path parsed again).
    pub fn to_op(&self) -> std::result::Result<Op, String> {
        let path = BoardPath::parse(&self.path).map_err(|e| format!("path {:?}: {}", self.path, e.reason))?;
        Ok(Op { name: self.op, path, value: self.value.clone() })
    }

    /// True when the record touched `path` (wrote it, something inside it, or a parent).
    pub fn touches(&self, path: &BoardPath) -> bool {
        BoardPath::parse(&self.path).is_ok_and(|p| p.is_within(path) || path.is_within(&p))
    }
}

/// One task's board.
#[derive(Debug, Clone)]
pub struct TaskBoard {
    store: Store,
    task: Id,
    /// `tasks/{task}/board`, relative to the root.
    dir: String,
    max_value_bytes: usize,
    /// With [`TaskBoard::cached`]: the board as this instance last loaded or wrote it.
    cache: Option<Arc<clawboard_core::lock::Lock<Option<Arc<BoardFile>>>>>,
}

fn record_name(seq: u64) -> String {
    format!("{seq:010}.json")
}

impl TaskBoard {
    /// The board of `task` (which must be a valid id; the task need not exist yet).
    pub fn new(store: &Store, task: &str) -> Result<TaskBoard> {
        let task = Id::new(task).map_err(|e| Error::Bad {
            task: task.to_owned(),
            path: "(task)".into(),
            reason: format!("not a valid task id: it {e}"),
        })?;
        let dir = layout::task_file(task.as_str(), BOARD_DIR);
        Ok(TaskBoard { store: store.clone(), task, dir, max_value_bytes: DEFAULT_MAX_VALUE_BYTES, cache: None })
    }

    /// Keeps the board in memory between calls (for the engine's run of a task,
    /// which loads it several times per step). Still current whatever else writes:
    /// records are numbered without gaps, so the cached board is the newest exactly
    /// while no record past its `seq` exists, which `load` checks (one `stat`).
    pub fn cached(mut self) -> TaskBoard {
        self.cache = Some(Default::default());
        self
    }

    /// Sets the largest value a write may carry.
    pub fn with_max_value_bytes(mut self, n: usize) -> TaskBoard {
        self.max_value_bytes = n;
        self
    }

    pub fn task(&self) -> &str {
        self.task.as_str()
    }

    fn rel(&self, rest: &str) -> Result<RelPath> {
        Ok(RelPath::new(&format!("{}/{rest}", self.dir))?)
    }

    /// The `board.json` path, relative to the root.
    pub fn board_rel(&self) -> Result<RelPath> {
        self.rel(BOARD_FILE)
    }

    fn bad(&self, (path, reason): ops::Refusal) -> Error {
        Error::Bad { task: self.task.to_string(), path, reason }
    }

    /// True when the task has a board (any write was ever made).
    pub fn exists(&self) -> bool {
        self.rel(BOARD_FILE).is_ok_and(|r| self.store.exists(&r))
            || self.rel(HISTORY_DIR).is_ok_and(|r| self.store.exists(&r))
    }

    /// Every record's sequence number, in order.
    fn record_seqs(&self) -> Result<Vec<u64>> {
        Ok(self.store.list_numbered(&self.rel(HISTORY_DIR)?.to_string())?)
    }

    fn read_record(&self, seq: u64) -> Result<Record> {
        let rel = self.rel(&format!("{HISTORY_DIR}/{}", record_name(seq)))?;
        let bytes = self.store.read_bytes(&rel)?;
        let r: Record = serde_json::from_slice(&bytes).map_err(|e| Error::History {
            task: self.task.to_string(),
            file: rel.to_string(),
            reason: e.to_string(),
        })?;
        if r.seq != seq {
            return Err(Error::History {
                task: self.task.to_string(),
                file: rel.to_string(),
                reason: format!("holds seq {}, not {seq}", r.seq),
            });
        }
        Ok(r)
    }

    /// Every record, oldest first (those touching `path` only, if given).
    pub fn history(&self, path: Option<&BoardPath>) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for seq in self.record_seqs()? {
            let r = self.read_record(seq)?;
            if path.is_none_or(|p| r.touches(p)) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// The records after seq `after`, oldest first.
    pub fn history_since(&self, after: u64) -> Result<Vec<Record>> {
        self.record_seqs()?.into_iter().filter(|s| *s > after).map(|s| self.read_record(s)).collect()
    }

    /// The board as of record `seq` (every record up to it, folded from empty).
    pub fn at(&self, seq: u64) -> Result<BoardFile> {
        let mut board = BoardFile::empty(self.task.clone());
        for s in self.record_seqs()?.into_iter().take_while(|s| *s <= seq) {
            self.fold(&mut board, &self.read_record(s)?)?;
        }
        Ok(board)
    }

    fn fold(&self, board: &mut BoardFile, r: &Record) -> Result<()> {
        let file = || format!("tasks/{}/board/history/{}", self.task, record_name(r.seq));
        let op = r.to_op().map_err(|reason| Error::History { task: self.task.to_string(), file: file(), reason })?;
        ops::apply(board, &op).map_err(|(p, reason)| Error::History {
            task: self.task.to_string(),
            file: file(),
            reason: format!("{p}: {reason}"),
        })?;
        board.seq = r.seq;
        board.updated_at = Some(r.at.clone());
        Ok(())
    }

    /// The current board: `board.json`, plus any record a crash kept out of it.
    pub fn load(&self) -> Result<BoardFile> {
        match &self.cache {
            Some(_) => self.load_shared().map(Arc::unwrap_or_clone),
            None => self.load_files(),
        }
    }

    /// [`TaskBoard::load`], shared with the cache of a [`TaskBoard::cached`] board
    /// instead of copied: for the engine, which reads the board several times a step.
    pub fn load_shared(&self) -> Result<Arc<BoardFile>> {
        let Some(cache) = &self.cache else { return self.load_files().map(Arc::new) };
        let held = cache.lock().clone();
        if let Some(b) = held {
            let next = self.rel(&format!("{HISTORY_DIR}/{}", record_name(b.seq + 1)))?;
            if !self.store.exists(&next) {
                return Ok(b);
            }
        }
        let board = Arc::new(self.load_files()?);
        *cache.lock() = Some(board.clone());
        Ok(board)
    }

    /// `board` (as [`TaskBoard::load_shared`] gave it) to change, owned: taken out
    /// of the cache (which `record` refills) rather than copied, when nothing else holds it.
    fn take_owned(&self, board: Arc<BoardFile>) -> BoardFile {
        if let Some(cache) = &self.cache {
            *cache.lock() = None;
        }
        Arc::unwrap_or_clone(board)
    }

    fn load_files(&self) -> Result<BoardFile> {
        let rel = self.rel(BOARD_FILE)?;
        let mut board = match self.store.read_bytes(&rel) {
            Ok(bytes) => match serde_json::from_slice::<BoardFile>(&bytes) {
                Ok(b) => b,
                // board.json is written without fsync: a power loss can leave it
                // empty or older. Older is completed below; unreadable, the board
                // is folded from the history alone.
                Err(e) if !self.record_seqs()?.is_empty() => {
                    tracing::warn!(task = %self.task, "{rel} is unreadable ({e}); folding the board from its history");
                    BoardFile::empty(self.task.clone())
                }
                Err(e) => {
                    return Err(Error::History {
                        task: self.task.to_string(),
                        file: rel.to_string(),
                        reason: e.to_string(),
                    });
                }
            },
            Err(clawboard_core::Error::NotFound { .. }) => BoardFile::empty(self.task.clone()),
            Err(e) => return Err(e.into()),
        };
        let after = board.seq;
        for seq in self.record_seqs()?.into_iter().filter(|s| *s > after) {
            let r = self.read_record(seq)?;
            self.fold(&mut board, &r)?;
        }
        Ok(board)
    }

    /// Checks `caller` may do `op` under `acl`'s zone table.
    pub fn authorize(
        &self,
        acl: &Acl,
        caller: &Caller,
        access: clawboard_core::acl::BoardOp,
        path: &BoardPath,
    ) -> Result<()> {
        if caller.is_builtin() {
            return Ok(());
        }
        // A role instance whose id is `human` or `daemon` is still held to its component.
        let role = if matches!(caller.role.as_str(), "human" | "daemon") { "role-instance" } else { &caller.role };
        let d = acl.check_board(role, caller.component, &caller.how, access, path.zone);
        if d.allowed {
            Ok(())
        } else {
            Err(Error::Refused { task: self.task.to_string(), path: path.to_string(), decision: Box::new(d) })
        }
    }

    /// Makes one write: authorized, checked, recorded, applied. Returns its record.
    pub fn write(&self, acl: &Acl, caller: &Caller, op: Op) -> Result<Record> {
        let board_rel = self.rel(BOARD_FILE)?;
        let _lock = self.store.lock(&board_rel)?;
        self.check(acl, caller, &op)?;
        let record = self.apply(self.load_shared()?, caller, op)?;
        // A write through the API is answered once it is durable.
        self.store.sync_records()?;
        Ok(record)
    }

    /// [`TaskBoard::write`], unless `op` would leave every zone as it is: then
    /// nothing is recorded (no history record, no new seq) and `None` comes back.
    /// For the daemon's own bookkeeping, which restates values (a stage or an
    /// iteration count that did not change).
    ///
    /// A restated value is found without the board's lock: the board as loaded
    /// holds every record written so far, so the op is a no-op as of a moment
    /// before any write still under way, which is where it is ordered. The
    /// cached board is asked first, unchecked: where it says the op changes the
    /// board, the write goes on to the locked load, which decides on the newest
    /// records; only a "no change" needs the cache confirmed current first.
    pub fn write_if_changed(&self, acl: &Acl, caller: &Caller, op: Op) -> Result<Option<Record>> {
        self.check(acl, caller, &op)?;
        let changes_cached = self.cache.as_ref().and_then(|c| c.lock().clone()).is_some_and(|b| ops::changes(&b, &op));
        if !changes_cached && !ops::changes(&*self.load_shared()?, &op) {
            return Ok(None);
        }
        let board_rel = self.rel(BOARD_FILE)?;
        let _lock = self.store.lock(&board_rel)?;
        let current = self.load_shared()?;
        if !ops::changes(&current, &op) {
            return Ok(None);
        }
        self.apply(current, caller, op).map(Some)
    }

    /// Applies `op` to `current` (the board as loaded under its lock) and records it.
    fn apply(&self, current: Arc<BoardFile>, caller: &Caller, op: Op) -> Result<Record> {
        let mut board = self.take_owned(current);
        ops::apply(&mut board, &op).map_err(|r| self.bad(r))?;
        self.record(board, caller, op)
    }

    /// That `caller` may do `op` and its value is within limits.
    fn check(&self, acl: &Acl, caller: &Caller, op: &Op) -> Result<()> {
        self.authorize(acl, caller, op.access(), &op.path)?;
        op.check_value(self.max_value_bytes).map_err(|r| self.bad(r))
    }

    /// Records `op`, already applied to `board`: its history record, then the folded board.
    fn record(&self, mut board: BoardFile, caller: &Caller, op: Op) -> Result<Record> {
        let board_rel = self.rel(BOARD_FILE)?;
        let record = Record {
            seq: board.seq + 1,
            at: Timestamp::now(),
            actor: Actor { role: caller.role.clone(), instance: caller.instance.clone() },
            component: caller.recorded_component(),
            op: op.name,
            path: op.path.to_string(),
            value: op.value,
        };
        board.seq = record.seq;
        board.updated_at = Some(record.at.clone());
        let text = clawboard_core::store::to_pretty_json(&board);
        let max = self.store.max_file_bytes();
        if text.len() as u64 > max {
            // Written, the board could not be read back (every file of the tree is
            // held to the limit): refused, and nothing is written.
            return Err(self.bad((
                record.path.clone(),
                format!(
                    "with this value the board would be {} bytes, over the {max}-byte limit of a file (limits.max_file_size)",
                    text.len()
                ),
            )));
        }
        let rec_rel = self.rel(&format!("{HISTORY_DIR}/{}", record_name(record.seq)))?;
        // Record first (durable at the store's next `sync_records`), then the folded
        // board, a checkpoint of the history that `load` completes from the records
        // past its seq (so it is a view: written without fsync).
        self.store.write_record_json(&rec_rel, &record)?;
        self.store.write_view_locked(&board_rel, text.as_bytes())?;
        if let Some(cache) = &self.cache {
            *cache.lock() = Some(Arc::new(board));
        }
        Ok(record)
    }

    // The seed's operations (seed 000, 操作接口), each one call.

    pub fn write_meta(&self, acl: &Acl, caller: &Caller, key: &str, value: Value) -> Result<Record> {
        let op = Op::write_meta(key, value).map_err(|r| self.bad(r))?;
        self.write(acl, caller, op)
    }

    pub fn write_content(&self, acl: &Acl, caller: &Caller, zone: &str, key: &str, value: Value) -> Result<Record> {
        let op = Op::write_content(zone, key, value).map_err(|r| self.bad(r))?;
        self.write(acl, caller, op)
    }

    pub fn write_control(&self, acl: &Acl, caller: &Caller, key: &str, value: Value) -> Result<Record> {
        let op = Op::write_control(key, value).map_err(|r| self.bad(r))?;
        self.write(acl, caller, op)
    }

    pub fn append_error(&self, acl: &Acl, caller: &Caller, error: &ErrorEntry) -> Result<Record> {
        self.write(acl, caller, Op::append_error(error))
    }

    pub fn update_step_status(&self, acl: &Acl, caller: &Caller, step_id: &str, status: &str) -> Result<Record> {
        let op = Op::update_step_status(step_id, status).map_err(|r| self.bad(r))?;
        self.write(acl, caller, op)
    }

    /// A direct read of `path` (a zone, or a key in it): `None` when absent.
    pub fn read(&self, acl: &Acl, caller: &Caller, path: &BoardPath) -> Result<Option<Value>> {
        self.authorize(acl, caller, clawboard_core::acl::BoardOp::Read, path)?;
        let board = self.load_shared()?;
        Ok(if path.keys.is_empty() {
            Some(ops::zone_value(&board, path.zone))
        } else {
            ops::get(&board, path).cloned()
        })
    }

    pub fn read_meta(&self, acl: &Acl, caller: &Caller, key: &str) -> Result<Option<Value>> {
        self.read(acl, caller, &self.parse(&format!("meta.{key}"))?)
    }

    pub fn read_content(&self, acl: &Acl, caller: &Caller, zone: &str, key: &str) -> Result<Option<Value>> {
        let p = if key.is_empty() { format!("content.{zone}") } else { format!("content.{zone}.{key}") };
        self.read(acl, caller, &self.parse(&p)?)
    }

    pub fn read_control(&self, acl: &Acl, caller: &Caller, key: &str) -> Result<Option<Value>> {
        self.read(acl, caller, &self.parse(&format!("control.{key}"))?)
    }

    /// `snapshot()`: the three zones; needs R on every zone.
    pub fn snapshot(&self, acl: &Acl, caller: &Caller) -> Result<Value> {
        for z in Zone::ALL {
            self.authorize(acl, caller, clawboard_core::acl::BoardOp::Read, &BoardPath { zone: z, keys: Vec::new() })?;
        }
        Ok(self.load_shared()?.zones())
    }

    /// Parses a path, naming the task in the error.
    pub fn parse(&self, path: &str) -> Result<BoardPath> {
        BoardPath::parse(path).map_err(|e| Error::Bad {
            task: self.task.to_string(),
            path: path.to_owned(),
            reason: format!("at position {}: {}", e.pos, e.reason),
        })
    }
}
