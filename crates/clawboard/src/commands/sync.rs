use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Args, Subcommand};
use clawboard_sync::PushReport;
use clawboard_sync::push;
use clawboard_sync::report::ProcessTotals;
use clawboard_sync::{AnyRemote, Client, Pull, Push, Remote};
use serde::Serialize;

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK, sync_error};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// Push the tree to the bucket, and check the bucket against it
#[derive(Debug, Subcommand)]
#[command(after_help = "The bucket is [sync.s3] in the config (any S3-compatible service: Cloudflare R2,
AWS S3, MinIO …), or, when none is set, the directory sync.dir (default
.clawboard/bucket). The daemon pushes on sync.schedule (every 5 minutes) and at
once when a task completes or fails; these commands work with or without it.

Examples:
  clawboard sync push          # push what changed since the last push
  clawboard sync pull          # apply what other nodes pushed
  clawboard sync status        # pending changes, last push, last error
  clawboard sync verify        # compare bucket and tree by hash
  clawboard sync verify --fix  # and repair the bucket
  clawboard sync full          # first push of an existing tree (resumable)")]
pub enum SyncCommand {
    /// Push now what changed since the last push
    Push(PushArgs),
    Pull(PullArgs),
    /// Push the whole tree, every file, not only what changed: the first push of an
    /// existing tree, or a bucket refilled from scratch. Resumable: run it again after
    /// an interruption and it goes on from where it stopped
    #[command(after_help = "Examples:
  clawboard sync full          # push every file of the tree
  clawboard sync full --json")]
    Full(PushArgs),
    Status(StatusArgs),
    Verify(VerifyArgs),
}

/// Push now what changed since the last push
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard sync push
  clawboard sync push --json")]
pub struct PushArgs {
    /// No progress bar even on a terminal
    #[arg(long)]
    pub no_progress: bool,
}

/// Apply what other nodes pushed since the last pull
#[derive(Debug, Args)]
#[command(after_help = "Reads the change-log segments other nodes wrote since this node's cursors
(or, when the log no longer reaches back that far, lists the bucket). A pull that
would delete more than sync.mass_delete_ratio of the tree is refused.

Examples:
  clawboard sync pull
  clawboard sync pull --allow-mass-delete   # after checking that the deletes are intended")]
pub struct PullArgs {
    /// Apply even a pull that deletes more than sync.mass_delete_ratio of the tree
    #[arg(long)]
    pub allow_mass_delete: bool,
}

/// Pending changes, last push and pull, last errors, lag
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard sync status
  clawboard sync status --json")]
pub struct StatusArgs {}

/// Compare the bucket with the tree by hash (like `rclone check`)
#[derive(Debug, Args)]
#[command(after_help = "Lists the bucket once. A single-part object is compared by its ETag (the MD5
of its content); any other by the BLAKE3 hash push stored in its metadata (one
HEAD each). Exit code 0 when they match, 1 when differences remain.

Examples:
  clawboard sync verify
  clawboard sync verify --fix --json")]
pub struct VerifyArgs {
    /// Upload what is missing or different, delete what is extra
    #[arg(long)]
    pub fix: bool,
}

pub fn run(c: SyncCommand, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let root = store.root().to_owned();
    if !s.sync.enabled {
        return Err(BadInput(format!(
            "sync is off in {} (sync.enabled = false)",
            s.config_file.as_ref().map_or("the config".to_owned(), |p| p.display().to_string())
        ))
        .into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let open = || async {
            let node = clawboard_sync::node_id(&root, s.node_id.as_deref()).map_err(sync_error)?;
            let remote = AnyRemote::open(&s.sync.backend, &root).await.map_err(sync_error)?;
            // This store reports to no journal: pulled files are journaled after the pull
            // (`pull_now`'s catch-up, or a running daemon's watcher).
            let writer = store.clone();
            anyhow::Ok(Client::open(remote, &root, s.sync.clone(), node, writer).map_err(sync_error)?)
        };
        match c {
            SyncCommand::Push(a) => push_now(open().await?.push, s, a, false).await,
            SyncCommand::Full(a) => push_now(open().await?.push, s, a, true).await,
            SyncCommand::Pull(a) => pull_now(open().await?.pull, s, a).await,
            SyncCommand::Status(_) => status(s, &root),
            SyncCommand::Verify(a) => verify(open().await?.push, s, a).await,
        }
    })
}

/// Without a daemon nothing journals the tree: catch the journal up first (as the
/// daemon does when it starts), holding the daemon lock so that none starts meanwhile.
fn catch_up(root: &std::path::Path) -> anyhow::Result<Option<std::fs::File>> {
    match crate::local::try_lock_root(root)? {
        crate::local::RootLock::Taken(lock) => {
            let n = clawboard_core::index::catch_up(root)?;
            if n > 0 {
                tracing::info!(changes = n, "journaled changes made while no daemon ran");
            }
            Ok(Some(lock))
        }
        crate::local::RootLock::HeldBy(pid) => {
            tracing::debug!(pid, "a daemon is running; it keeps the journal");
            Ok(None)
        }
    }
}

async fn push_now(push: Arc<Push<AnyRemote>>, s: &Settings, a: PushArgs, full: bool) -> anyhow::Result<u8> {
    let _lock = catch_up(push.sync().root())?;
    let bar = (!a.no_progress && !s.json && std::io::stderr().is_terminal()).then(|| {
        let p = push.progress.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let (planned, done) = (p.planned.load(Ordering::Relaxed), p.done.load(Ordering::Relaxed));
                // Only large pushes get a bar.
                if planned >= 200 {
                    let mib = p.bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64;
                    let width = 30;
                    let filled = (done * width / planned.max(1)).min(width) as usize;
                    eprint!(
                        "\r[{}{}] {done}/{planned} files, {mib:.1} MiB ",
                        "#".repeat(filled),
                        " ".repeat(width as usize - filled)
                    );
                    let _ = std::io::stderr().flush();
                }
            }
        })
    });
    let result = if full { push.full().await } else { push.push().await };
    if let Some(bar) = bar {
        bar.abort();
        if push.progress.planned.load(Ordering::Relaxed) >= 200 {
            eprintln!();
        }
    }
    let report = result?;
    if s.json {
        output::json(&report)?;
    } else {
        outln!("{}", describe(&report, &push.sync().remote().describe()))?;
    }
    Ok(EXIT_OK)
}

async fn pull_now(pull: Arc<Pull<AnyRemote>>, s: &Settings, a: PullArgs) -> anyhow::Result<u8> {
    let lock = catch_up(pull.sync().root())?;
    let report = match pull.pull(a.allow_mass_delete).await {
        Ok(r) => r,
        Err(e @ clawboard_sync::Error::Refused { .. }) => {
            pull.raise(&format!("sync pull refused on node {}: {e}", pull.sync().node())).await?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    if lock.is_some() {
        // Journal what the pull wrote (as a daemon's watcher would).
        clawboard_core::index::catch_up(pull.sync().root())?;
    }
    if s.json {
        output::json(&report)?;
    } else {
        outln!(
            "Pulled from {}: {} segments, {} files written, {} deleted, {} conflicts{}.",
            pull.sync().remote().describe(),
            report.segments,
            report.applied,
            report.deleted,
            report.conflicts.len(),
            if report.full { " (full reconcile by listing)" } else { "" }
        )?;
        for c in &report.conflicts {
            match &c.copy {
                Some(copy) => outln!("  conflict  {}  {} won; {}'s version kept as {copy}", c.path, c.winner, c.loser)?,
                None => outln!(
                    "  conflict  {}  {}'s delete lost against {}'s change; the file stays",
                    c.path,
                    c.loser,
                    c.winner
                )?,
            }
        }
    }
    Ok(EXIT_OK)
}

fn describe(r: &PushReport, remote: &str) -> String {
    if r.uploaded + r.deleted == 0 {
        return format!("Nothing to push to {remote} ({} changes checked, all already there).", r.unchanged);
    }
    format!(
        "Pushed to {remote}: {} uploaded ({}), {} deleted, {} unchanged, in {:.1} s.",
        r.uploaded,
        human_bytes(r.bytes),
        r.deleted,
        r.unchanged,
        r.elapsed_ms as f64 / 1000.0
    )
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SyncStatus {
    remote: Option<String>,
    node: Option<String>,
    pending: push::Pending,
    last_push_at: Option<String>,
    last_push: Option<PushReport>,
    last_error: Option<String>,
    last_error_at: Option<String>,
    last_pull_at: Option<String>,
    last_pull: Option<clawboard_sync::PullReport>,
    last_pull_error: Option<String>,
    last_pull_error_at: Option<String>,
    this_process: ProcessTotals,
}

fn status(s: &Settings, root: &std::path::Path) -> anyhow::Result<u8> {
    let file = push::read_status(root).unwrap_or_default();
    let pending = push::pending(root)?;
    let remote = match &s.sync.backend {
        clawboard_sync::Backend::S3(c) => format!("s3://{}/{}", c.bucket, c.prefix),
        clawboard_sync::Backend::Dir(d) => {
            format!("dir:{}", if d.is_absolute() { d.clone() } else { root.join(d) }.display())
        }
    };
    let st = SyncStatus {
        remote: Some(remote),
        node: clawboard_sync::node_id(root, s.node_id.as_deref()).ok(),
        pending,
        last_push_at: file.last_push_at,
        last_push: file.last_push,
        last_error: file.last_error,
        last_error_at: file.last_error_at,
        last_pull_at: file.last_pull_at,
        last_pull: file.last_pull,
        last_pull_error: file.last_pull_error,
        last_pull_error_at: file.last_pull_error_at,
        this_process: file.this_process,
    };
    if s.json {
        output::json(&st)?;
        return Ok(EXIT_OK);
    }
    let mut t = output::Table::new(&["", ""]);
    t.row(vec!["remote".into(), st.remote.unwrap_or_default()]);
    t.row(vec!["node".into(), st.node.unwrap_or_default()]);
    let lag = st.pending.oldest_age_secs.map_or(String::new(), |a| format!(" (oldest changed {a} s ago)"));
    t.row(vec!["pending".into(), format!("{} journal entries{lag}", st.pending.entries)]);
    let last = match (&st.last_push_at, &st.last_push) {
        (Some(at), Some(r)) => {
            format!("{at}: {} uploaded, {} deleted, {}", r.uploaded, r.deleted, human_bytes(r.bytes))
        }
        _ => "never".into(),
    };
    t.row(vec!["last push".into(), last]);
    let err = match (&st.last_error, &st.last_error_at) {
        (Some(e), Some(at)) => format!("{at}: {e}"),
        _ => "none".into(),
    };
    t.row(vec!["last error".into(), err]);
    let pull = match (&st.last_pull_at, &st.last_pull) {
        (Some(at), Some(r)) => format!(
            "{at}: {} segments, {} written, {} deleted, {} conflicts{}",
            r.segments,
            r.applied,
            r.deleted,
            r.conflicts.len(),
            if r.full { " (full reconcile)" } else { "" }
        ),
        _ => "never".into(),
    };
    t.row(vec!["last pull".into(), pull]);
    if let (Some(e), Some(at)) = (&st.last_pull_error, &st.last_pull_error_at) {
        t.row(vec!["pull error".into(), format!("{at}: {e}")]);
    }
    out!("{}", t.render().lines().skip(1).map(|l| format!("{l}\n")).collect::<String>())?;
    Ok(EXIT_OK)
}

async fn verify(push: Arc<Push<AnyRemote>>, s: &Settings, a: VerifyArgs) -> anyhow::Result<u8> {
    let report = clawboard_sync::verify::verify(&push, a.fix).await?;
    let remaining = if a.fix && report.fixed as usize >= report.differences() { 0 } else { report.differences() };
    if s.json {
        output::json(&report)?;
    } else {
        outln!(
            "{}: {} match, {} missing, {} extra, {} different{}",
            push.sync().remote().describe(),
            report.matched,
            report.missing.len(),
            report.extra.len(),
            report.different.len(),
            if a.fix { format!("; fixed {}", report.fixed) } else { String::new() }
        )?;
        for (what, list) in [("missing", &report.missing), ("extra", &report.extra), ("different", &report.different)] {
            for p in list.iter().take(20) {
                outln!("  {what:<9}  {p}")?;
            }
            if list.len() > 20 {
                outln!("  … and {} more {what}", list.len() - 20)?;
            }
        }
    }
    Ok(if remaining == 0 { EXIT_OK } else { EXIT_FAILURE })
}
