//! `clawboard daemon`: the wiring, in [`run`]'s phases. `Daemon::start`: one lock
//! per root, the checks that can refuse a start, the journal recorder, the store
//! (its write-ahead log replayed), the engine and the dispatcher driving tasks
//! through it. `install`: each subsystem's `install(&mut Runner, &Parts)` adds its
//! jobs (sync and the cluster, archive, records, retention, GitHub, intake, lanes,
//! notifications). `serve`: the local API, the review page, systemd's watchdog.
//! `until_stop`: signals (SIGTERM/SIGINT stop, SIGHUP reloads) or a job's failure.
//! `stop`: the grace period, the jobs' ends, the last writes made durable.

pub(crate) mod api;
mod archive;
mod cluster;
mod dispatch;
mod github;
mod intake;
mod jobs;
mod lanes;
mod metrics;
mod notify;
mod recorder;
mod records;
mod retention;
mod sync;
mod systemd;
mod web;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clawboard_core::journal::Origin;
use clawboard_core::{Store, Timestamp};
use clawboard_roles::{Engine, Shutdown, claims, intake as roles_intake, runner};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::cli::GlobalArgs;
use crate::config::{self, Settings};

/// Shared with the API handlers.
pub struct DaemonState {
    pub root: PathBuf,
    pub started_at: String,
    pub dispatcher: Arc<dispatch::Dispatcher>,
    /// The last journaled sequence number.
    pub last_seq: watch::Receiver<u64>,
    /// The daemon's store (writes are journaled as the daemon's).
    pub store: Store,
    pub counters: Arc<web::Counters>,
    pub sync_enabled: bool,
    pub archive_enabled: bool,
    /// The background jobs, for `/metrics`.
    pub jobs: Arc<jobs::Registry>,
    /// A person's board writes come through the API with this token
    /// (`.clawboard/person-token`), so that they are numbered with the
    /// daemon's own records, some of which are not on disk yet.
    pub person_token: String,
    /// This node's id when it shares a bucket (part of the ids of entries it makes).
    pub node: Option<String>,
    /// Every task's row, kept by the journal thread: the API's task list and
    /// retention read it instead of every `task.json`.
    pub tasks: Arc<clawboard_core::lock::Lock<clawboard_core::summary::TaskSummary>>,
}

/// How long a starting daemon waits for the root's lock to be let go of
/// ([`crate::local::lock_root_patiently`]).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Holds `.clawboard/daemon.lock` for the life of the daemon.
fn lock_root(root: &Path) -> anyhow::Result<File> {
    let mut f = match crate::local::lock_root_patiently(root, LOCK_PATIENCE)? {
        crate::local::RootLock::Taken(f) => f,
        crate::local::RootLock::HeldBy(pid) if pid.is_empty() => bail!(
            "another clawboard process holds {} (a `clawboard run` or `clawboard sync`, which name no pid in it); let it end first, or use another --root",
            root.join(".clawboard/daemon.lock").display()
        ),
        crate::local::RootLock::HeldBy(pid) => bail!(
            "another clawboard daemon (pid {pid}) is already running on {}; stop it first (e.g. `systemctl stop clawboard`) or use another --root",
            root.display()
        ),
    };
    f.set_len(0)
        .and_then(|()| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .context("writing the daemon lock")?;
    Ok(f)
}

/// Refuses a state directory (`.clawboard/`) holding anything but directories and
/// regular files (and the API socket): the daemon writes its journal, locks and
/// cursors there by name, and a symbolic link or a FIFO planted in it would make
/// those writes land outside the root, or block.
pub fn check_state_dir(root: &Path) -> anyhow::Result<()> {
    let state = root.join(clawboard_core::layout::STATE);
    for entry in walkdir::WalkDir::new(&state).follow_links(false).follow_root_links(false) {
        let entry = match entry {
            Ok(e) => e,
            // Removed while walking (a bucket directory emptied by a push): nothing to check.
            Err(e) if e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => continue,
            Err(e) => return Err(e).with_context(|| format!("checking {}", state.display())),
        };
        let ft = entry.file_type();
        let what = if ft.is_symlink() {
            "a symbolic link"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() && entry.depth() == 1 && entry.file_name() == "api.sock" {
            continue;
        } else if ft.is_socket() || ft.is_block_device() || ft.is_char_device() {
            "a socket or device"
        } else {
            continue;
        };
        bail!(
            "{}: {what} in clawboard's state directory, which holds only plain files and directories; remove it (and find out who put it there) before starting the daemon",
            entry.path().display()
        );
    }
    Ok(())
}

/// A new token for a person's board writes, in `.clawboard/person-token` (mode
/// 600, replaced atomically).
fn write_person_token(root: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token = clawboard_core::token::secret_hex(16).context("no randomness from the OS for the person token")?;
    let path = root.join(clawboard_core::layout::PERSON_TOKEN);
    let tmp = path.with_extension(format!("clawboard-tmp.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(token)
}

/// What a subsystem's jobs are built from: each module's `install` takes it.
pub struct Parts<'a> {
    pub settings: &'a Settings,
    pub store: &'a Store,
    pub dispatcher: &'a Arc<dispatch::Dispatcher>,
    pub state: &'a Arc<DaemonState>,
    pub clock: jobs::Clock,
    /// This node's id, when it shares a bucket or archives (`state.node`: only the former).
    pub node: Option<&'a str>,
}

/// Runs the daemon until SIGTERM/SIGINT; `args` is kept to reload the config on SIGHUP.
pub async fn run(args: GlobalArgs, settings: Settings) -> anyhow::Result<()> {
    let (mut d, pulled) = Daemon::start(&settings)?;
    d.install(&settings, pulled).await?;
    d.serve(&settings);
    systemd::ready("intake live");
    tracing::info!(root = %d.state.root.display(), pid = std::process::id(), "daemon ready");
    let failure = d.until_stop(&args, &settings).await;
    d.stop(settings.daemon.shutdown_grace).await?;
    failure.map_or(Ok(()), Err)
}

/// A running daemon: its lock, journal recorder, store, engine and jobs.
struct Daemon {
    _lock: File,
    node: Option<String>,
    web_token: Option<String>,
    stopping_tx: watch::Sender<bool>,
    kill_tx: watch::Sender<bool>,
    recorder: recorder::Recorder,
    jobs: jobs::Runner,
    store: Store,
    dispatcher: Arc<dispatch::Dispatcher>,
    state: Arc<DaemonState>,
}

impl Daemon {
    /// Everything that can refuse to start does so here, before any work begins;
    /// then the write-ahead log is replayed and the engine built. Also returns the
    /// store pulled changes are written through (journaled as the remote's).
    fn start(settings: &Settings) -> anyhow::Result<(Daemon, Store)> {
        let (_, report) = Store::init(&settings.root)?;
        let root = report.root.clone();
        check_state_dir(&root)?;
        let lock = lock_root(&root)?;
        let web_token = match settings.review.web.listen {
            Some(_) => Some(web::load_token(&settings.review.web.token)?),
            None => None,
        };
        let (engine_config, acl_source) = config::engine::build(settings)?;
        tracing::info!(acl = %acl_source, "access control loaded");
        for w in settings.blueprints.warnings() {
            tracing::warn!("{w}");
        }
        config::check_sandbox(settings)?;
        crate::telemetry::install(settings.telemetry.as_ref(), &root, settings.node_id.as_deref())?;
        let node = if settings.sync.enabled || settings.archive.enabled {
            let id = clawboard_sync::node_id(&root, settings.node_id.as_deref());
            Some(id.map_err(crate::cli::sync_error)?)
        } else {
            None
        };
        if let Err(e) = runner::close_own_proc_files() {
            tracing::warn!("cannot close /proc/{}/environ to role processes: {e}", std::process::id());
        }
        let orphans = runner::kill_orphans(&root.display().to_string());
        if orphans > 0 {
            tracing::warn!(orphans, "killed role processes left running by a daemon that died");
        }

        let (stopping_tx, stopping) = watch::channel(false);
        let (kill_tx, kill) = watch::channel(false);
        let registry = Arc::new(jobs::Registry::default());
        let (recorder, sink) = recorder::Recorder::start(&root, registry.clone())?;
        let journal = jobs::JournalFeed {
            dir: root.join(clawboard_core::layout::JOURNAL),
            cursors: root.join(clawboard_core::layout::CURSORS),
            last_seq: recorder.last_seq.clone(),
        };
        let jobs = jobs::Runner::new(stopping.clone(), registry.clone(), journal);
        // Records are deferred as in `clawboard run`: appended to the write-ahead
        // log, one sync per step, the files written just after. What a crash (of a
        // daemon or of a `clawboard run`) left in the log is written out first,
        // before anything reads a task. A person's `clawboard board` writes come
        // through the API meanwhile (`person_token`), not to the files.
        let store = Store::open(&root)?
            .with_max_file_bytes(settings.max_file_bytes)
            .with_sink(sink.clone(), Origin::Daemon)
            .with_deferred_writes()?;
        let person_token = write_person_token(&root)?;
        let pulled = Store::open(&root)?.with_max_file_bytes(settings.max_file_bytes).with_sink(sink, Origin::Remote);
        let stale = clawboard_roles::clear_active_instances(&store)?;
        if stale > 0 {
            tracing::info!(stale, "cleared role instances a previous daemon left in roles/active.json");
        }
        let engine = Arc::new(Engine::new(store.clone(), engine_config, Shutdown { stopping, kill }));
        let dispatcher = dispatch::Dispatcher::new(engine);
        let state = Arc::new(DaemonState {
            root,
            started_at: Timestamp::now().to_string(),
            dispatcher: dispatcher.clone(),
            last_seq: recorder.last_seq.clone(),
            store: store.clone(),
            counters: Arc::new(web::Counters::default()),
            sync_enabled: settings.sync.enabled,
            archive_enabled: settings.archive.enabled,
            jobs: registry,
            node: node.clone().filter(|_| settings.sync.enabled),
            person_token,
            tasks: recorder.tasks.clone(),
        });
        let daemon =
            Daemon { _lock: lock, node, web_token, stopping_tx, kill_tx, recorder, jobs, store, dispatcher, state };
        Ok((daemon, pulled))
    }

    /// Finishes what a crash interrupted (staged intakes, then every active
    /// task), and installs every subsystem's jobs.
    async fn install(&mut self, settings: &Settings, pulled: Store) -> anyhow::Result<()> {
        for outcome in roles_intake::recover_staged(&self.store)? {
            tracing::info!("recovered an interrupted intake: {:?}", outcome?);
        }
        let active = claims::active(&self.store)?;
        if !active.is_empty() {
            tracing::info!(tasks = active.len(), "resuming active tasks");
        }
        let stopping = self.stopping_tx.subscribe();
        self.jobs.spawn("dispatch", self.dispatcher.clone().run(stopping));
        let p = Parts {
            settings,
            store: &self.store,
            dispatcher: &self.dispatcher,
            state: &self.state,
            clock: jobs::Clock::System,
            node: self.node.as_deref(),
        };
        let cluster = sync::install(&mut self.jobs, &p, pulled, self.recorder.flusher(), active).await?;
        archive::install(&mut self.jobs, &p);
        records::install(&mut self.jobs, &p);
        retention::install(&mut self.jobs, &p);
        github::install(&mut self.jobs, &p)?;
        intake::install(&mut self.jobs, &p, cluster.clone());
        lanes::install(&mut self.jobs, &p, cluster);
        notify::install(&mut self.jobs, &p)?;
        // A cursor of a consumer that is off (sync or notifications turned off) would
        // hold back journal compaction forever; turned on again, it starts over.
        self.jobs.drop_unregistered_cursors()
    }

    /// The API on its socket, the review page when configured, systemd's watchdog.
    fn serve(&mut self, settings: &Settings) {
        let stopping = self.stopping_tx.subscribe();
        self.jobs.spawn("api", api::serve(self.state.clone(), stopping.clone()));
        if let (Some(addr), Some(token)) = (settings.review.web.listen, self.web_token.take()) {
            let web = web::serve(self.state.clone(), self.store.clone(), addr, token, stopping.clone());
            self.jobs.spawn("web", web);
        }
        self.jobs.spawn("watchdog", async move {
            systemd::watchdog(stopping).await;
            Ok(())
        });
    }

    /// Until SIGTERM or SIGINT (reloading on SIGHUP), or a job's end: that is a
    /// critical failure, returned.
    async fn until_stop(&mut self, args: &GlobalArgs, settings: &Settings) -> Option<anyhow::Error> {
        let handlers = (|| {
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
                signal(SignalKind::hangup())?,
            ))
        })();
        let (mut term, mut int, mut hup) = match handlers {
            Ok(h) => h,
            Err(e) => return Some(anyhow::Error::new(e).context("installing the signal handlers")),
        };
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM: stopping"); return None }
                _ = int.recv() => { tracing::info!("SIGINT: stopping"); return None }
                _ = hup.recv() => reload(args, settings, &self.dispatcher),
                Some((name, done)) = self.jobs.join_next() => {
                    let err = done.err().unwrap_or_else(|| anyhow::anyhow!("{name} stopped unexpectedly"));
                    tracing::error!("{err:#}; stopping");
                    return Some(err);
                }
            }
        }
    }

    /// Running roles get `grace` to finish, then are killed; every job ends; the
    /// deferred files are written and fsynced and the log emptied (a clean stop
    /// leaves nothing to replay); the recorder's last entries are durable.
    async fn stop(self, grace: std::time::Duration) -> anyhow::Result<()> {
        let Daemon { stopping_tx, kill_tx, recorder, jobs, store, dispatcher, state, .. } = self;
        systemd::stopping();
        stopping_tx.send_replace(true);
        if tokio::time::timeout(grace, dispatcher.idle()).await.is_err() {
            tracing::warn!(?grace, "roles still running after the grace period; killing them");
            kill_tx.send_replace(true);
            dispatcher.idle().await;
        }
        jobs.finish().await;
        drop(dispatcher);
        drop(state);
        tokio::task::spawn_blocking(|| crate::telemetry::flush(crate::telemetry::FLUSH_AT_EXIT)).await?;
        tokio::task::spawn_blocking(move || store.checkpoint()).await??;
        tokio::task::spawn_blocking(move || recorder.stop()).await??;
        tracing::info!("stopped; every cursor is durable");
        Ok(())
    }
}

/// SIGHUP: the config file read again and the engine's whole config swapped in,
/// or, when it does not resolve or changes what takes a restart, refused with
/// the reason and the old config kept.
fn reload(args: &GlobalArgs, running: &Settings, dispatcher: &Arc<dispatch::Dispatcher>) {
    systemd::reloading();
    let resolved = config::resolve(args, &config::Env::from_process()).and_then(|mut s| {
        s.log_for_a_daemon();
        // The tree, its lock and the sandbox's deny list are the running root's.
        anyhow::ensure!(
            s.root == running.root,
            "it names the root {}, but this daemon serves {}; restart it to change the root",
            s.root.display(),
            running.root.display()
        );
        let changed = config::engine::restart_only_changes(running, &s);
        anyhow::ensure!(
            changed.is_empty(),
            "it changes {}, which the daemon set up at its start; restart it to apply them",
            changed.join(", ")
        );
        config::check_sandbox(&s)?;
        let (engine_config, acl_source) = config::engine::build(&s)?;
        Ok((s, engine_config, acl_source))
    });
    match resolved {
        Ok((s, engine_config, acl_source)) => {
            dispatcher.engine.reload(engine_config);
            dispatcher.resize();
            tracing::info!(acl = %acl_source, "SIGHUP: config reloaded (roles, lifecycle, ACL, templates, blueprints, lanes)");
            // The retention loop reads retention.yaml at every run: check it now.
            match s.retention.policy() {
                Ok((_, source)) => tracing::info!(policy = %source, "SIGHUP: retention policy checked"),
                Err(e) => {
                    tracing::error!("SIGHUP: retention: {e}; no retention run deletes anything until it is fixed")
                }
            }
        }
        Err(e) => tracing::error!("SIGHUP: config not reloaded, keeping the old one: {e:#}"),
    }
    systemd::ready("config reloaded");
}
