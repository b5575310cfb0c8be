use std::path::Path;

use clap::Args;
use clawboard_core::formats::{Escalation, TaskStatus};
use clawboard_core::{RelPath, Store, layout};
use serde::Serialize;

use crate::cli::EXIT_OK;
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// Show the blackboard at a glance: tasks by status, inbox, escalations
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard status
  clawboard status --root /srv/blackboard --json")]
pub struct StatusArgs {}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    root: String,
    config_file: Option<String>,
    version: &'static str,
    /// Task counts by status, in lifecycle order.
    tasks: serde_json::Map<String, serde_json::Value>,
    unreadable_tasks: usize,
    inbox_waiting: usize,
    inbox_rejected: usize,
    escalations_pending: usize,
    /// The running daemon's own report (from its API), or null when none runs.
    daemon: Option<serde_json::Value>,
    /// Layout entries that are missing (`clawboard init` restores them).
    missing: Vec<String>,
    /// This node's id among the nodes sharing the bucket.
    node: Option<String>,
    /// Every node's last heartbeat, as this node folded them (`shared/node-status.json`).
    nodes: Option<clawboard_core::formats::NodeStatus>,
    /// Sync conflicts this node resolved (the newest last).
    conflicts: Vec<serde_json::Value>,
    /// The memory archive (`clawboard archive status`), when it is on.
    archive: Option<clawboard_archive::Status>,
    /// Why the archive's status could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    archive_error: Option<String>,
    /// The review page's address while the daemon serves it (without the token).
    web: Option<String>,
}

/// One line of `conflicts.jsonl` as `status` shows it: where the losing version is
/// now (a copy this node withdrew from a task it lost is under `.clawboard/fenced/`).
fn conflict_line(root: &Path, c: &serde_json::Value) -> String {
    let copy = c["copy"].as_str();
    let withdrawn = copy
        .filter(|copy| !root.join(copy).exists())
        .and_then(clawboard_sync::copy::kept_path)
        .filter(|kept| root.join(kept).is_file());
    let kept = match (withdrawn, copy) {
        (Some(kept), _) => format!("{kept}, taken out of the task"),
        (None, Some(copy)) => copy.to_owned(),
        (None, None) => "-".to_owned(),
    };
    format!(
        "  {}  {} (kept {} as {kept})",
        c["at"].as_str().unwrap_or("?"),
        c["path"].as_str().unwrap_or("?"),
        c["loser"].as_str().unwrap_or("?")
    )
}

fn count_json(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
        .unwrap_or(0)
}

fn pending_escalations(store: &Store) -> anyhow::Result<usize> {
    let dir = store.root().join(layout::ESCALATIONS);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir)?.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !name.ends_with(".json") {
            continue;
        }
        match store.read::<Escalation>(&RelPath::new(&format!("{}/{name}", layout::ESCALATIONS))?) {
            Ok(e) if e.decision.is_none() => n += 1,
            Ok(_) => {}
            Err(e) => tracing::warn!("skipping an escalation that cannot be read: {e}"),
        }
    }
    Ok(n)
}

pub fn run(_: StatusArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let status = Status::read(&store, s)?;
    if s.json {
        output::json(&status)?;
    } else {
        status.print(store.root())?;
    }
    Ok(EXIT_OK)
}

/// Tasks by status (in [`TaskStatus::ALL`]'s order) and how many do not read:
/// from the running daemon's task summary, else from every `task.json`.
fn task_counts(store: &Store, daemon: Option<&serde_json::Value>) -> anyhow::Result<([usize; 4], usize)> {
    let mut counts = [0usize; 4];
    let slot = |s: TaskStatus| TaskStatus::ALL.iter().position(|x| *x == s).unwrap_or(0);
    // The daemon's answer (its summary in memory) first: nothing to read.
    if let Some(by_status) = daemon.and_then(|d| d["tasks"].as_object()) {
        for s in TaskStatus::ALL {
            counts[slot(*s)] = by_status.get(s.as_str()).and_then(serde_json::Value::as_u64).unwrap_or(0) as usize;
        }
        let unreadable = daemon.and_then(|d| d["unreadableTasks"].as_u64()).unwrap_or(0) as usize;
        return Ok((counts, unreadable));
    }
    if let Some(summary) = crate::commands::task::daemon_summary(store.root()) {
        for (status, n) in summary.counts() {
            counts[slot(status)] = n;
        }
        return Ok((counts, summary.unreadable().count()));
    }
    let mut unreadable = 0;
    for (_, t) in store.tasks()? {
        match t {
            Ok(t) => counts[slot(t.status)] += 1,
            Err(_) => unreadable += 1,
        }
    }
    Ok((counts, unreadable))
}

impl Status {
    fn read(store: &Store, s: &Settings) -> anyhow::Result<Status> {
        let root = store.root();
        let daemon = crate::local::get_json(root, "/v1/status");
        let (counts, unreadable_tasks) = task_counts(store, daemon.as_ref())?;
        let tasks = TaskStatus::ALL.iter().zip(counts).map(|(s, n)| (s.as_str().to_owned(), n.into())).collect();
        let mut missing: Vec<String> =
            layout::DIRS.iter().filter(|d| !root.join(d).is_dir()).map(|d| format!("{d}/")).collect();
        missing.extend(
            layout::initial_files().into_iter().map(|(f, _)| f).filter(|f| !root.join(f).exists()).map(str::to_owned),
        );
        let web = daemon.as_ref().and_then(|_| {
            std::fs::read_to_string(root.join(crate::local::WEB_ADDR_FILE))
                .ok()
                .map(|a| format!("http://{}/", a.trim()))
        });
        let (mut archive, mut archive_error) = (None, None);
        if s.archive.enabled {
            match crate::commands::archive::open(s).and_then(|a| Ok(a.status()?)) {
                Ok(a) => archive = Some(a),
                Err(e) => archive_error = Some(format!("{e:#}")),
            }
        }
        Ok(Status {
            root: root.display().to_string(),
            config_file: s.config_file.as_ref().map(|p| p.display().to_string()),
            version: env!("CARGO_PKG_VERSION"),
            tasks,
            unreadable_tasks,
            inbox_waiting: count_json(&root.join(layout::INBOX)),
            inbox_rejected: count_json(&root.join(layout::REJECTED)),
            escalations_pending: pending_escalations(store)?,
            daemon,
            missing,
            node: s.sync.enabled.then(|| clawboard_sync::node_id(root, s.node_id.as_deref()).ok()).flatten(),
            nodes: store.read(&RelPath::new("shared/node-status.json")?).ok(),
            conflicts: std::fs::read_to_string(root.join(".clawboard/sync/conflicts.jsonl"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            archive,
            archive_error,
            web,
        })
    }

    fn print(&self, root: &Path) -> anyhow::Result<()> {
        outln!("clawboard {}  root {}", self.version, self.root)?;
        if let Some(c) = &self.config_file {
            outln!("config       {c}")?;
        }
        let counts: Vec<String> = self.tasks.iter().map(|(k, v)| format!("{v} {k}")).collect();
        outln!("tasks        {}", counts.join(", "))?;
        if self.unreadable_tasks > 0 {
            outln!("             {} unreadable (see `clawboard validate`)", self.unreadable_tasks)?;
        }
        outln!("inbox        {} waiting, {} rejected", self.inbox_waiting, self.inbox_rejected)?;
        match &self.daemon {
            Some(d) => {
                let q = &d["queue"];
                outln!(
                    "daemon       running (pid {}), since {}; {} running, {} waiting, {} held; {} role instances",
                    d["pid"],
                    d["startedAt"].as_str().unwrap_or("?"),
                    q["running"],
                    q["waiting"],
                    q["held"],
                    d["instances"]
                )?;
            }
            None => outln!("daemon       not running")?,
        }
        outln!("escalations  {} pending", self.escalations_pending)?;
        if let Some(url) = &self.web {
            outln!("web          {url}  (`clawboard web token` prints the URL with the token)")?;
        }
        self.print_nodes(root)?;
        self.print_archive()?;
        if !self.missing.is_empty() {
            outln!("missing      {} (run `clawboard init` to restore)", self.missing.join(", "))?;
        }
        Ok(())
    }

    /// This node, every node's last heartbeat and the latest sync conflicts.
    fn print_nodes(&self, root: &Path) -> anyhow::Result<()> {
        if let Some(node) = &self.node {
            outln!("node         {node}")?;
        }
        if let Some(nodes) = &self.nodes {
            for (id, n) in &nodes.nodes {
                let state = n.extra.get("state").and_then(|v| v.as_str()).unwrap_or("?");
                let running: Vec<&str> = n.running_tasks.iter().map(|t| t.as_str()).collect();
                outln!(
                    "  {id:<24} {state:<5}  last seen {}  v{}  running: {}",
                    n.last_seen,
                    n.version.as_deref().unwrap_or("?"),
                    if running.is_empty() { "-".to_owned() } else { running.join(", ") }
                )?;
            }
        }
        if !self.conflicts.is_empty() {
            outln!("conflicts    {} resolved by sync; the latest:", self.conflicts.len())?;
            for c in self.conflicts.iter().rev().take(5) {
                outln!("{}", conflict_line(root, c))?;
            }
        }
        Ok(())
    }

    fn print_archive(&self) -> anyhow::Result<()> {
        if let Some(a) = &self.archive {
            let short = |id: &Option<String>| id.as_deref().map_or("-".to_owned(), |i| i.chars().take(12).collect());
            let pushed = match &a.remote {
                Some(r) => format!(
                    "; pushed to {r} at {} ({} pending)",
                    a.file.last_push_at.as_deref().unwrap_or("never"),
                    a.pending
                ),
                None => "; local only (no archive.remote)".to_owned(),
            };
            match a.commits {
                0 => outln!("archive      no commits yet on {} (`clawboard archive now`){pushed}", a.branch)?,
                n => outln!(
                    "archive      {n} commit(s) on {}, the last {} at {}{pushed}",
                    a.branch,
                    short(&a.file.last_commit),
                    a.file.last_commit_at.as_deref().unwrap_or("-")
                )?,
            }
            if let Some(e) = &a.file.last_error {
                outln!("             last error: {e}")?;
            }
        }
        if let Some(e) = &self.archive_error {
            outln!("archive      status unreadable: {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::conflict_line;

    #[test]
    fn a_conflict_names_where_the_losing_version_is_now() {
        let d = tempfile::tempdir().unwrap();
        let copy = "tasks/t1/task.conflict-node-b-20261127T080000000Z.json";
        let c = serde_json::json!({"path": "tasks/t1/task.json", "copy": copy, "winner": "node-a",
                                   "loser": "node-b", "at": "2026-11-27T08:00:00Z"});
        let line = |c: &serde_json::Value| conflict_line(d.path(), c);
        // Gone from the task and not kept here: the name it was given.
        assert_eq!(line(&c), format!("  2026-11-27T08:00:00Z  tasks/t1/task.json (kept node-b as {copy})"));
        let kept = d.path().join(".clawboard/fenced/t1/task.conflict-node-b-20261127T080000000Z.json");
        std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
        std::fs::write(&kept, "{}").unwrap();
        assert_eq!(
            line(&c),
            "  2026-11-27T08:00:00Z  tasks/t1/task.json (kept node-b as \
             .clawboard/fenced/t1/task.conflict-node-b-20261127T080000000Z.json, taken out of the task)"
        );
        // Still in the task (another node's copy of it, say): that one.
        std::fs::create_dir_all(d.path().join("tasks/t1")).unwrap();
        std::fs::write(d.path().join(copy), "{}").unwrap();
        assert!(line(&c).ends_with(&format!("as {copy})")));
        let deleted = serde_json::json!({"path": "gm/x.md", "winner": "a", "loser": "b", "at": "t"});
        assert_eq!(line(&deleted), "  t  gm/x.md (kept b as -)");
    }
}
