//! `clawboard daemon`: the wiring. One lock per root; the journal recorder; the
//! intake consumer; the dispatcher driving tasks through the engine; the local API;
//! systemd notifications; signals (SIGTERM/SIGINT stop, SIGHUP reloads).

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

pub use api::get_json;
pub use web::ADDR_FILE as WEB_ADDR_FILE;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
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
    /// Who may write what through `/v1/write`.
    pub acl: clawboard_core::acl::Acl,
    /// The background jobs, for `/metrics`.
    pub jobs: Arc<jobs::Registry>,
    /// Which role plays which actor (entries written through the API).
    pub lanes: Arc<clawboard_entries::Lanes>,
    /// A person's board writes come through the API with this token
    /// (`.clawboard/person-token`), so that they are numbered with the
    /// daemon's own records, some of which are not on disk yet.
    pub person_token: String,
    /// This node's id when it shares a bucket (part of the ids of entries it makes).
    pub node: Option<String>,
}

/// `.clawboard/daemon.lock`, taken or not. Whoever holds it is the journal's only writer.
pub enum RootLock {
    Taken(File),
    /// A daemon holds it: its pid as it wrote it (empty if unreadable).
    HeldBy(String),
}

/// Takes `.clawboard/daemon.lock` if no daemon holds it.
pub fn try_lock_root(root: &Path) -> anyhow::Result<RootLock> {
    let path = root.join(".clawboard/daemon.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(RootLock::Taken(f)),
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            // The pid only names the holder in a message; an unreadable one stays empty.
            if let Err(e) = f.read_to_string(&mut pid) {
                tracing::debug!("cannot read the pid in {}: {e}", path.display());
            }
            Ok(RootLock::HeldBy(pid.trim().to_owned()))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Holds `.clawboard/daemon.lock` for the life of the daemon.
fn lock_root(root: &Path) -> anyhow::Result<File> {
    let mut f = match try_lock_root(root)? {
        RootLock::Taken(f) => f,
        RootLock::HeldBy(pid) => bail!(
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

/// Runs the daemon until SIGTERM/SIGINT; `args` is kept to reload the config on SIGHUP.
pub async fn run(args: GlobalArgs, settings: Settings) -> anyhow::Result<()> {
    // The root as the config gave it: a reload that names another is refused.
    let configured_root = settings.root.clone();
    let (_, report) = Store::init(&settings.root)?;
    let root = report.root.clone();
    check_state_dir(&root)?;
    let _lock = lock_root(&root)?;
    // What can refuse to start does so before any work begins.
    let web_token = match settings.review.web.listen {
        Some(_) => Some(web::load_token(&settings.review.web.token)?),
        None => None,
    };
    let (acl, acl_source) = crate::commands::acl::load(&settings)?;
    tracing::info!(acl = %acl_source, "access control loaded");
    config::check_sandbox(&settings)?;
    let node = if settings.sync.enabled || settings.archive.enabled {
        Some(clawboard_sync::node_id(&root, settings.node_id.as_deref()).map_err(crate::commands::sync::user_error)?)
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
    let journal = jobs::Journal {
        dir: root.join(clawboard_core::layout::JOURNAL),
        cursors: root.join(clawboard_core::layout::CURSORS),
        last_seq: recorder.last_seq.clone(),
    };
    let mut jobs = jobs::Runner::new(stopping.clone(), registry.clone(), journal);
    let clock = jobs::Clock::System;
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

    let engine =
        Arc::new(Engine::new(store.clone(), settings.roles.clone(), Shutdown { stopping: stopping.clone(), kill }));
    engine.set_acl(Arc::new(acl.clone()));
    engine.set_templates(settings.templates.clone());
    engine.set_blueprints(settings.blueprints.clone());
    let dispatcher = dispatch::Dispatcher::new(engine.clone());
    let counters = Arc::new(web::Counters::default());
    let state = Arc::new(DaemonState {
        root: root.clone(),
        started_at: Timestamp::now().to_string(),
        dispatcher: dispatcher.clone(),
        last_seq: recorder.last_seq.clone(),
        store: store.clone(),
        counters: counters.clone(),
        sync_enabled: settings.sync.enabled,
        archive_enabled: settings.archive.enabled,
        acl,
        jobs: registry.clone(),
        lanes: Arc::new(settings.lanes.clone()),
        node: node.clone().filter(|_| settings.sync.enabled),
        person_token,
    });

    // Finish what a crash interrupted: staged intakes, then every active task.
    for outcome in roles_intake::recover_staged(&store)? {
        tracing::info!("recovered an interrupted intake: {outcome:?}");
    }
    let active = claims::active(&store)?;
    if !active.is_empty() {
        tracing::info!(tasks = active.len(), "resuming active tasks");
    }

    jobs.spawn("dispatch", dispatcher.clone().run(stopping.clone()));
    let mut cluster = None;
    if let Some(node) = node.clone().filter(|_| settings.sync.enabled) {
        use crate::commands::sync::user_error;
        let remote = clawboard_sync::AnyRemote::open(&settings.sync.backend, &root).await.map_err(user_error)?;
        let client =
            clawboard_sync::Client::open(remote, &root, settings.sync.clone(), node, pulled).map_err(user_error)?;
        // Claimed tasks resume once the cluster confirmed this node still holds them.
        let c = cluster::Cluster::new(client.cluster, client.pull.clone(), dispatcher.clone(), store.clone());
        jobs.worker("claims", cluster::Claims::new(c.clone()));
        jobs.worker("accepted-claims", cluster::AcceptedClaims::new(c.clone()));
        jobs.worker("heartbeat", cluster::Beat::new(c.clone()));
        let push = sync::Push::new(
            client.push,
            dispatcher.task_ended.clone(),
            recorder.flusher(),
            c.checked.subscribe(),
            clock,
            c.steps.clone(),
        );
        jobs.worker("push", push);
        // The push keeps its own cursor; compaction honours it.
        registry.add_cursor(clawboard_sync::PUSH_CURSOR);
        if settings.sync.pull {
            jobs.worker(
                "pull",
                sync::Pull::new(client.pull, dispatcher.records_due.clone(), c.checked.subscribe(), clock),
            );
        }
        cluster = Some(c);
    } else {
        for id in active {
            dispatcher.enqueue(id);
        }
    }
    if let Some(node) = node.clone().filter(|_| settings.archive.enabled) {
        let a = &settings.archive;
        let archive = clawboard_archive::Archive::new(store.clone(), a.settings.clone(), node);
        jobs.worker("archive", archive::Memory::new(archive, a, clock));
    }
    let records = records::Records::new(
        store.clone(),
        dispatcher.clone(),
        &settings.review.reports,
        settings.retention.clone(),
        clock,
    );
    jobs.worker("records", records);
    if settings.retention.enabled {
        match settings.retention.policy() {
            Ok((_, source)) => {
                tracing::info!(policy = %source, schedule = %settings.retention.schedule.text, "retention on")
            }
            Err(e) => tracing::error!("retention: {e}; fix it: until then no retention run deletes anything"),
        }
        let r = retention::Retention::new(store.clone(), settings.clone(), clock);
        jobs.worker("retention", r);
    }
    if settings.github.enabled {
        let g = github::Github::open(store.clone(), state.lanes.clone(), settings.github.clone(), clock)?;
        jobs.worker("github", g);
    }
    jobs.consumer("intake", intake::IntakeConsumer::new(store.clone(), dispatcher.clone(), cluster.clone()));
    if !settings.lanes.is_empty() {
        let consumer = lanes::LaneConsumer::new(
            store.clone(),
            engine.clone(),
            state.lanes.clone(),
            cluster,
            settings.daemon.shutdown_grace,
        );
        jobs.consumer(lanes::CURSOR, consumer);
    }
    if settings.review.notify.is_configured() {
        tracing::info!(levels = ?settings.review.notify.levels, "escalation notifications on");
        let sync_node = node.filter(|_| settings.sync.enabled);
        let notifier = notify::Notifier::new(settings.review.notify.clone(), Store::open(&root)?, counters, sync_node)?;
        jobs.consumer(notify::CURSOR, notify::Notifications::new(notifier));
    }
    // A cursor of a consumer that is off (sync or notifications turned off) would
    // hold back journal compaction forever; turned on again, it starts over.
    jobs.drop_unregistered_cursors()?;
    jobs.spawn("api", api::serve(state.clone(), stopping.clone()));
    if let (Some(addr), Some(token)) = (settings.review.web.listen, web_token) {
        jobs.spawn("web", web::serve(state.clone(), store.clone(), addr, token, stopping.clone()));
    }
    jobs.spawn("watchdog", {
        let s = stopping.clone();
        async move {
            systemd::watchdog(s).await;
            Ok(())
        }
    });
    systemd::ready("intake live");
    tracing::info!(root = %root.display(), pid = std::process::id(), "daemon ready");

    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut failure = None;
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: stopping"); break }
            _ = int.recv() => { tracing::info!("SIGINT: stopping"); break }
            _ = hup.recv() => reload(&args, &configured_root, &dispatcher),
            Some((name, done)) = jobs.join_next() => {
                // A job ended before the stop: that is a critical failure.
                let err = done.err().unwrap_or_else(|| anyhow::anyhow!("{name} stopped unexpectedly"));
                tracing::error!("{err:#}; stopping");
                failure = Some(err);
                break;
            }
        }
    }

    systemd::stopping();
    stopping_tx.send_replace(true);
    let grace = settings.daemon.shutdown_grace;
    if tokio::time::timeout(grace, dispatcher.idle()).await.is_err() {
        tracing::warn!(?grace, "roles still running after the grace period; killing them");
        kill_tx.send_replace(true);
        dispatcher.idle().await;
    }
    jobs.finish().await;
    drop(engine);
    drop(dispatcher);
    drop(state);
    // Every deferred file written and fsynced, the log emptied: a clean stop
    // leaves nothing to replay.
    let settled = store.clone();
    tokio::task::spawn_blocking(move || settled.checkpoint()).await??;
    drop(store);
    tokio::task::spawn_blocking(move || recorder.stop()).await??;
    tracing::info!("stopped; every cursor is durable");
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn reload(args: &GlobalArgs, root: &Path, dispatcher: &Arc<dispatch::Dispatcher>) {
    systemd::reloading();
    let resolved = config::resolve(args, &config::Env::from_process()).and_then(|s| {
        // The tree, its lock and the sandbox's deny list are the running root's.
        anyhow::ensure!(
            s.root == root,
            "it names the root {}, but this daemon serves {}; restart it to change the root",
            s.root.display(),
            root.display()
        );
        config::check_sandbox(&s)?;
        Ok(s)
    });
    match resolved {
        Ok(s) => {
            dispatcher.engine.set_templates(s.templates.clone());
            dispatcher.engine.set_blueprints(s.blueprints.clone());
            dispatcher.engine.reload(s.roles);
            dispatcher.resize();
            tracing::info!("SIGHUP: config reloaded (roles, lifecycle)");
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
