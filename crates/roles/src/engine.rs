//! The task lifecycle (seed 002): pending → running → PM picks the team → the team
//! runs in priority order → result → validation (the team iterates while it fails,
//! up to `max_iterations`) → memory harvest → completed (or failed).
//!
//! Everything needed to resume lives in the task directory: a step is done when it
//! has an attempt with status `ok`, so a restarted daemon continues each task from
//! its last finished step, and no step that finished runs again.
//!
//! Here: [`Engine`], its settings and [`Engine::drive`]; one drive of a task and the
//! lifecycle's order of steps in `engine/run.rs`; one step in `engine/step.rs`; the
//! one executor every role call runs through (a step's, a blueprint step's, a
//! lane's entry's: retries, backoff, fallback, attempt records) in `engine/call.rs`,
//! and an entry's call in `engine/entry.rs`; the products written from the attempts
//! (`team-composition.json`, `result.json`, `validation.json`, `memory-harvest.json`,
//! the memory queue) in `engine/products.rs`; the task's board in `engine/board.rs`.

mod blueprint;
mod board;
mod call;
pub mod entry;
pub mod guard;
mod page;
mod products;
mod run;
mod spans;
pub mod step;

use std::sync::Arc;

use clawboard_core::formats::{ActiveInstances, Instance, InstanceStatus, Task, TaskStatus};
use clawboard_core::lock::Lock;
use clawboard_core::{Error, RelPath, Store, Timestamp, layout};
use clawboard_records::attempts::AttemptStatus;
use tokio::sync::{Semaphore, watch};

use crate::claims;
use crate::config::RolesConfig;
pub use guard::{BoxFuture, ClaimGuard, Hold};
pub(crate) use run::TaskRun;

/// How a drive of a task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed,
    Failed(String),
    /// Waiting for decisions on these escalations.
    Held(Vec<String>),
    /// The daemon is stopping; the task resumes on the next start.
    Stopped,
    /// Another node took the task over: this node stopped and wrote nothing more.
    Fenced,
}

/// Why a step did not produce its output.
#[derive(Debug)]
pub(crate) enum StepError {
    Failed(String),
    Held(Vec<String>),
    Stopped,
    Fenced,
    Store(Error),
}

impl From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Store(e)
    }
}

/// Signals from the daemon: `stopping` (start nothing new) and `kill` (interrupt runs).
#[derive(Debug, Clone)]
pub struct Shutdown {
    pub stopping: watch::Receiver<bool>,
    pub kill: watch::Receiver<bool>,
}

impl Shutdown {
    /// Signals that never fire (for one-shot use and tests).
    pub fn never() -> Shutdown {
        let (s, stopping) = watch::channel(false);
        let (k, kill) = watch::channel(false);
        // Keep the senders alive for the life of the program: the receivers then
        // simply never change.
        std::mem::forget(s);
        std::mem::forget(k);
        Shutdown { stopping, kill }
    }
}

/// Everything the engine runs by, built once from the config and replaced whole
/// on a reload (SIGHUP): a step reads one snapshot, never half of an old config
/// and half of a new one.
#[derive(Clone)]
pub struct EngineConfig {
    /// `[lifecycle]` and `[roles.*]`.
    pub roles: Arc<RolesConfig>,
    /// The access policy: a role's context holds only the files its R cells
    /// allow, and board writes are checked against it. `None` (unit tests,
    /// tools): contexts are not filtered, board writes follow the seed's matrix.
    pub acl: Option<Arc<clawboard_core::acl::Acl>>,
    /// Slice templates by id (the seed's four unless others are loaded).
    pub templates: Arc<std::collections::BTreeMap<String, clawboard_board::Template>>,
    /// The blueprints tasks may name (seed 001), with their middleware config.
    pub blueprints: Arc<clawboard_blueprint::Catalog>,
    /// Which role plays which actor of which lane (seed 004).
    pub lanes: Arc<clawboard_entries::Lanes>,
}

impl From<RolesConfig> for EngineConfig {
    /// The roles alone: the seed's templates, and no ACL, blueprints or lanes.
    fn from(roles: RolesConfig) -> EngineConfig {
        EngineConfig {
            roles: Arc::new(roles),
            acl: None,
            templates: Arc::new(clawboard_board::template::load(None).unwrap_or_default()),
            blueprints: Arc::new(clawboard_blueprint::Catalog::default()),
            lanes: Arc::new(clawboard_entries::Lanes::default()),
        }
    }
}

/// Runs tasks' lifecycles. Cheap to share; one per daemon.
pub struct Engine {
    pub(crate) store: Store,
    config: Lock<Arc<EngineConfig>>,
    pub(crate) roles: Arc<Semaphore>,
    pub(crate) shutdown: Shutdown,
    /// Role instances running now, for the API: (instance, role, task, step, started).
    pub(crate) instances: Lock<Vec<InstanceInfo>>,
    /// Held while `roles/active.json` is written from `instances`, so that an
    /// older list never lands over a newer one.
    active_view: Lock<()>,
    /// Escalations that running task instances raised through the API (`POST
    /// /v1/write`), by instance id: an instance has an entry from before its token
    /// works until its attempt is recorded, which takes them into its `escalations`,
    /// so they hold the task as the ones in its output do. Held while such a file is
    /// created, so that none is written after its attempt was recorded.
    raised: Lock<std::collections::HashMap<String, Vec<String>>>,
    /// Tasks another node took over: never driven or written here again.
    fenced: Lock<std::collections::HashSet<String>>,
    /// Whether this node holds a task's claim (several nodes on one bucket; see `engine/guard.rs`).
    guard: Lock<Option<Arc<dyn guard::ClaimGuard>>>,
    /// Role runs since start, by outcome (`ok`, `failed`, `timed_out`, `interrupted`).
    runs: Lock<std::collections::BTreeMap<&'static str, u64>>,
    /// A replay's recorded attempts: role calls are answered from them, never run.
    recording: Option<Arc<crate::replay::Recording>>,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    pub id: String,
    pub role: String,
    pub task_id: String,
    pub step: String,
    pub started_at: Timestamp,
    /// The instance's secret (`CLAWBOARD_TOKEN`): never shown, valid while it runs.
    #[serde(skip)]
    pub token: String,
}

impl Engine {
    pub fn new(store: Store, config: impl Into<EngineConfig>, shutdown: Shutdown) -> Engine {
        let config = config.into();
        let roles = Arc::new(Semaphore::new(config.roles.lifecycle.max_parallel_roles));
        // Read and looked up now, not at the first role's start (a `readlink`
        // of ~35 µs there, and a walk of PATH).
        crate::runner::own_exe();
        crate::runner::resolve_programs(&config.roles.roles);
        Engine {
            store,
            config: Lock::new(Arc::new(config)),
            roles,
            shutdown,
            instances: Lock::new(Vec::new()),
            active_view: Lock::new(()),
            raised: Lock::new(Default::default()),
            fenced: Lock::new(Default::default()),
            guard: Lock::new(None),
            runs: Lock::new(Default::default()),
            recording: None,
        }
    }

    /// This engine replays: each role call is answered from `recording`'s attempt
    /// for the same step and role (no process, request or wait), and what it is
    /// handed is compared with what that attempt was handed.
    pub fn replaying(mut self, recording: Arc<crate::replay::Recording>) -> Engine {
        self.recording = Some(recording);
        self
    }

    pub(crate) fn recording(&self) -> Option<&crate::replay::Recording> {
        self.recording.as_deref()
    }

    pub fn blueprints(&self) -> Arc<clawboard_blueprint::Catalog> {
        self.config().blueprints.clone()
    }

    pub fn templates(&self) -> Arc<std::collections::BTreeMap<String, clawboard_board::Template>> {
        self.config().templates.clone()
    }

    /// The policy board writes are checked against (the seed's when none is configured).
    pub fn board_acl(&self) -> Arc<clawboard_core::acl::Acl> {
        static SEED: std::sync::OnceLock<Option<Arc<clawboard_core::acl::Acl>>> = std::sync::OnceLock::new();
        if let Some(a) = self.config().acl.clone() {
            return a;
        }
        SEED.get_or_init(|| clawboard_core::acl::Acl::seed().ok().map(Arc::new))
            .clone()
            .unwrap_or_else(|| Arc::new(clawboard_core::acl::Acl::empty()))
    }

    /// May `role`, running for `task`, read `path`? `Err` holds the rule that refused it.
    pub fn may_read(&self, role: &str, task: &str, path: &str) -> Result<(), String> {
        match &self.config().acl {
            Some(acl) => {
                let d = acl.check_instance(role, task, clawboard_core::acl::Op::Read, path);
                if d.allowed { Ok(()) } else { Err(d.rule) }
            }
            None => Ok(()),
        }
    }

    /// Another node holds `task_id` now: its drive stops at the next step and writes nothing more.
    pub fn fence(&self, task_id: &str) {
        if self.fenced.lock().insert(task_id.to_owned()) {
            spans::fenced(self, task_id);
        }
    }

    /// This node took `task_id` over from node `from` (claim generation
    /// `generation`): said in the task's trace.
    pub fn taken_over(&self, task_id: &str, from: &str, generation: u64) {
        spans::taken_over(self, task_id, from, generation);
    }

    /// This node holds `task_id` again (it took the task back over).
    pub fn unfence(&self, task_id: &str) {
        self.fenced.lock().remove(task_id);
    }

    pub fn is_fenced(&self, task_id: &str) -> bool {
        self.fenced.lock().contains(task_id)
    }

    /// The config in force; a reload takes effect at the next step.
    /// Whether the daemon is stopping (long work of its own ends early).
    pub fn stopping(&self) -> bool {
        *self.shutdown.stopping.borrow()
    }

    pub fn config(&self) -> Arc<EngineConfig> {
        self.config.lock().clone()
    }

    /// `[lifecycle]` and `[roles.*]` of the config in force.
    pub fn roles(&self) -> Arc<RolesConfig> {
        self.config().roles.clone()
    }

    /// Replaces the whole config (SIGHUP). Raising `max_parallel_roles` adds
    /// permits at once; lowering it takes the surplus away as running roles end.
    pub fn reload(&self, new: EngineConfig) {
        let (old, new_max) = (self.roles().lifecycle.max_parallel_roles, new.roles.lifecycle.max_parallel_roles);
        if new_max > old {
            self.roles.add_permits(new_max - old);
        } else if new_max < old {
            let surplus = u32::try_from(old - new_max).unwrap_or(u32::MAX);
            let permits = self.roles.clone();
            let take = async move {
                if let Ok(p) = permits.acquire_many_owned(surplus).await {
                    p.forget();
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn(take)),
                Err(_) => tracing::warn!("max_parallel_roles lowered outside a runtime: it takes a restart"),
            }
        }
        // Programs are looked up afresh, as after bash's `hash -r`.
        crate::runner::forget_programs();
        crate::runner::resolve_programs(&new.roles.roles);
        *self.config.lock() = Arc::new(new);
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn count_run(&self, status: AttemptStatus) {
        use AttemptStatus as S;
        let name = match status {
            S::Ok => "ok",
            S::Failed => "failed",
            S::TimedOut => "timed_out",
            S::Interrupted => "interrupted",
            S::Running => return,
        };
        *self.runs.lock().entry(name).or_default() += 1;
    }

    /// Role runs since the engine started, by outcome.
    pub fn run_counts(&self) -> Vec<(&'static str, u64)> {
        self.runs.lock().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The running instance whose token is `token` (compared in constant time with
    /// every live token); none once the instance ended.
    pub fn instance_by_token(&self, token: &str) -> Option<InstanceInfo> {
        let v = self.instances.lock();
        let mut found = None;
        for i in v.iter() {
            if clawboard_core::token::constant_time_eq(i.token.as_bytes(), token.as_bytes()) && !i.token.is_empty() {
                found = Some(i.clone());
            }
        }
        found
    }

    /// Makes `token` invalid (its instance ended).
    pub(crate) fn revoke_token(&self, token: &str) {
        for i in self.instances.lock().iter_mut().filter(|i| i.token == token) {
            i.token.clear();
        }
    }

    /// Raises escalation `escalation_id` for the running instance `instance`: `create`
    /// writes its file. A task instance's escalation is recorded with the instance, and
    /// its attempt's record lists it (see [`Attempt::escalations`]), so one that needs
    /// approval holds the task exactly like one in the role's output. `Ok(false)`:
    /// the instance's attempt was recorded already (its run ended), so nothing was
    /// written, since nothing could hold the task any more.
    ///
    /// [`Attempt::escalations`]: clawboard_records::attempts::Attempt::escalations
    pub fn raise_escalation(
        &self,
        instance: &InstanceInfo,
        escalation_id: &str,
        create: impl FnOnce() -> Result<(), Error>,
    ) -> Result<bool, Error> {
        if instance.task_id.is_empty() {
            // An entry's run: no task to hold.
            return create().map(|()| true);
        }
        let mut raised = self.raised.lock();
        let Some(ids) = raised.get_mut(&instance.id) else { return Ok(false) };
        create()?;
        ids.push(escalation_id.to_owned());
        Ok(true)
    }

    /// From now until [`Engine::take_raised`], escalations instance `id` raises through
    /// the API are kept for its attempt.
    pub(crate) fn open_raised(&self, instance_id: &str) {
        self.raised.lock().insert(instance_id.to_owned(), Vec::new());
    }

    /// The escalations instance `id` raised through the API; it can raise no more.
    pub(crate) fn take_raised(&self, instance_id: &str) -> Vec<String> {
        self.raised.lock().remove(instance_id).unwrap_or_default()
    }

    pub fn running_instances(&self) -> Vec<InstanceInfo> {
        self.instances.lock().clone()
    }

    /// Writes `roles/active.json`: the task instances running in this process,
    /// which are all of the tree's (one daemon or one `clawboard run` holds a
    /// tree). Written from memory, never read back: a view, without fsync.
    pub(crate) fn write_active_instances(&self) -> Result<(), Error> {
        let _view = self.active_view.lock();
        let list = {
            let running = self.instances.lock();
            ActiveInstances {
                instances: running
                    .iter()
                    .filter_map(|i| {
                        Some(Instance {
                            id: clawboard_core::Id::new(i.id.clone()).ok()?,
                            role: clawboard_core::Id::new(i.role.clone()).ok()?,
                            // An entry's run has no task: not listed.
                            task_id: clawboard_core::Id::new(i.task_id.clone()).ok()?,
                            started_at: i.started_at.clone(),
                            status: InstanceStatus::Running,
                            extra: Default::default(),
                        })
                    })
                    .collect(),
                extra: Default::default(),
            }
        };
        let rel = RelPath::new(layout::ACTIVE_INSTANCES)?;
        self.store.write_view(&rel, clawboard_core::store::to_pretty_json(&list).as_bytes())
    }

    /// Drives `task_id` as far as it can go now. An `Err` is a storage failure: the
    /// task stays active and is resumed later.
    pub async fn drive(&self, task_id: &str) -> Result<Outcome, Error> {
        match self.held(task_id).await {
            Ok(()) => {}
            Err(StepError::Stopped) => return Ok(Outcome::Stopped),
            Err(_) => return Ok(Outcome::Fenced),
        }
        let task_rel = RelPath::new(&layout::task_file(task_id, layout::TASK_FILE))?;
        let mut task: Task = self.store.read(&task_rel)?;
        if matches!(task.status, TaskStatus::Completed | TaskStatus::Failed) {
            claims::finish(&self.store, task_id)?;
            return Ok(if task.status == TaskStatus::Completed {
                Outcome::Completed
            } else {
                Outcome::Failed("already failed".into())
            });
        }
        let cfg = self.roles();
        let mut run = TaskRun::open(self, task.clone(), &cfg)?;
        if task.status == TaskStatus::Pending {
            task.status = TaskStatus::Running;
            run.task = task.clone();
        }
        // pending → running: a crash before it is written leaves `pending`, which
        // resumes the same way. With deferred writes (the daemon, `clawboard run`)
        // it is a record in the log, made durable by the first step's one sync.
        // Without, it is a durable write of its own (two fsyncs), done while the
        // first role starts, not before it.
        let running = run.task.status == TaskStatus::Running
            && self.store.read::<Task>(&task_rel).is_ok_and(|t| t.status == TaskStatus::Pending);
        let logged = running && self.store.defers_writes();
        if logged {
            self.store.write_record_json(&task_rel, &run.task)?;
        }
        let mark_running = async {
            if running && !logged {
                self.store.write_json(&task_rel, &run.task)?;
            }
            Ok::<(), Error>(())
        };
        let (result, marked) = tokio::join!(run.lifecycle(&cfg), mark_running);
        marked?;
        // The end is written only by the claim's holder (confirmed again).
        let end = match &result {
            Ok(()) | Err(StepError::Failed(_)) => self.confirmed(task_id).await,
            _ if self.is_fenced(task_id) => Err(StepError::Fenced),
            _ => Ok(()),
        };
        match end {
            Ok(()) => {}
            Err(StepError::Stopped) => return Ok(Outcome::Stopped),
            Err(_) => return Ok(Outcome::Fenced),
        }
        // Every file the steps wrote is on disk before the task says it ended.
        self.store.settle();
        let outcome = match result {
            Ok(()) => {
                let totals = run.record_token_totals()?;
                task.status = TaskStatus::Completed;
                task.completed_at = Some(Timestamp::now());
                self.store.write_json(&task_rel, &task)?;
                run.task = task;
                run.progress(|p| {
                    p.step = "done".into();
                    p.outcome = Some("completed".into());
                    p.held_by.clear();
                });
                claims::finish(&self.store, task_id)?;
                run.send_spans();
                spans::task_ended(self, run.trace.as_ref(), &run.task, None, totals);
                Outcome::Completed
            }
            Err(StepError::Failed(reason)) => {
                run.write_partial_result(&reason)?;
                let totals = run.record_token_totals()?;
                task.status = TaskStatus::Failed;
                task.completed_at = Some(Timestamp::now());
                self.store.write_json(&task_rel, &task)?;
                run.task = task;
                run.log_error("task", &reason)?;
                run.progress(|p| {
                    p.outcome = Some("failed".into());
                    p.last_error = Some(reason.clone());
                    p.held_by.clear();
                });
                claims::finish(&self.store, task_id)?;
                run.send_spans();
                spans::task_ended(self, run.trace.as_ref(), &run.task, Some(&reason), totals);
                Outcome::Failed(reason)
            }
            Err(StepError::Held(ids)) => {
                spans::held(run.trace.as_ref(), task_id, &ids);
                run.progress(|p| p.held_by = ids.clone());
                Outcome::Held(ids)
            }
            Err(StepError::Stopped) => Outcome::Stopped,
            Err(StepError::Fenced) => return Ok(Outcome::Fenced),
            Err(StepError::Store(e)) => return Err(e),
        };
        run.flush_status();
        self.store.settle();
        Ok(outcome)
    }
}
