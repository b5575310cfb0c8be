//! Escalation notifications: when an escalation of a configured level
//! (`notify.levels`, default critical) is raised on this node, the hook runs: a
//! command that gets the escalation JSON on stdin, and/or a webhook POST of
//! `{"text", "id", "escalation"}` (a Telegram `sendMessage?chat_id=…` URL reads the
//! `text`). Each is retried `notify.retries` times, `notify.retry_delay` apart with
//! doubling (up to an hour); a failure is logged and counted, and never touches the task.
//!
//! It consumes the change journal with a durable cursor (`.clawboard/cursors/notify`):
//! escalations pulled from other nodes are theirs to notify; an escalation raised
//! just before a crash, or whose hook was still retrying when the daemon stopped,
//! is notified when the daemon starts again. The cursor never passes a
//! notification still being sent, and moves past each one as soon as it is done,
//! so a restart does not send a finished one again (only a crash in the moment
//! between a hook finishing and the cursor's write can).

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use clawboard_core::Store;
use clawboard_core::backoff::Backoff;
use clawboard_core::journal::{ChangeKind, Journaled, Origin};
use clawboard_records::escalations;
use clawboard_records::review;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

use super::Parts;
use super::jobs::{Consumer, JobResult, Runner};
use crate::config::NotifyResolved;

/// The longest wait between two tries of a hook.
const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The notifier's cursor, in `.clawboard/cursors/` (journal compaction honours it).
pub const CURSOR: &str = "notify";

/// The notifier, when `[notify]` names a command or a webhook.
pub fn install(jobs: &mut Runner, p: &Parts) -> anyhow::Result<()> {
    let n = &p.settings.review.notify;
    if !n.is_configured() {
        return Ok(());
    }
    tracing::info!(levels = ?n.levels, "escalation notifications on");
    let notifier =
        Notifier::new(n.clone(), Store::open(&p.state.root)?, p.state.counters.clone(), p.state.node.clone())?;
    jobs.consumer(CURSOR, Notifications::new(notifier));
    Ok(())
}

/// The notifier as a journal consumer: the notifications being sent, and the
/// escalations this run has seen.
pub struct Notifications {
    notifier: Arc<Notifier>,
    tasks: JoinSet<()>,
    /// The notifications being sent: their task, and the entry that raised each.
    sending: HashMap<tokio::task::Id, u64>,
    /// Escalations notified (or being notified) by this run.
    seen: HashSet<String>,
}

impl Notifications {
    pub fn new(notifier: Notifier) -> Notifications {
        Notifications {
            notifier: Arc::new(notifier),
            tasks: JoinSet::new(),
            sending: HashMap::new(),
            seen: HashSet::new(),
        }
    }
}

/// Notifications still being sent when the daemon stops end with it (their tasks
/// are dropped with the consumer); the cursor stays before them, so the next start
/// sends them again.
impl Consumer for Notifications {
    /// Starts a notification for every escalation in `batch` that is due one.
    async fn handle(&mut self, batch: Vec<Journaled>) -> JobResult {
        let n = &self.notifier;
        for e in batch {
            let Some(id) = escalation_of(&e, n.node.as_deref()) else { continue };
            let esc = match escalations::load(&n.store, id) {
                Ok(e) => e,
                Err(clawboard_core::Error::NotFound { .. }) => continue, // removed since
                Err(e) => {
                    n.counters.notify_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(escalation = %id, "not notified: the escalation cannot be read: {e}");
                    continue;
                }
            };
            if esc.decision.is_some() || !n.config.levels.contains(&esc.level) {
                continue;
            }
            if !self.seen.insert(id.to_owned()) {
                continue;
            }
            let entry = review::EscalationFile { id: id.to_owned(), escalation: esc };
            let me = n.clone();
            let task = self.tasks.spawn(async move { me.notify(entry).await });
            self.sending.insert(task.id(), e.seq);
        }
        Ok(())
    }

    /// Just before the oldest notification still being sent.
    fn durable(&self, handled: u64) -> u64 {
        self.sending.values().min().map_or(handled, |seq| seq.saturating_sub(1).min(handled))
    }

    /// Returns when a notification finished (the runner then stores the cursor past it).
    async fn wait_for_work(&mut self) {
        let Some(done) = self.tasks.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let id = match &done {
            Ok((id, ())) => *id,
            Err(e) => {
                // A panicking hook task still counts as tried: it must not hold the cursor forever.
                tracing::error!("a notification task failed: {e}");
                e.id()
            }
        };
        self.sending.remove(&id);
    }
}

pub struct Notifier {
    pub config: NotifyResolved,
    pub store: Store,
    pub counters: Arc<super::web::Counters>,
    client: reqwest::Client,
    /// With sync on: this node's id. Its sync-conflict escalations are written as
    /// pulled changes, yet this node raised them.
    node: Option<String>,
}

/// The escalation id of a journal entry that may raise one on this node: a put by
/// this machine, or a sync-conflict escalation this node (`node`) raised.
fn escalation_of<'e>(e: &'e Journaled, node: Option<&str>) -> Option<&'e str> {
    if e.change.kind != ChangeKind::Put {
        return None;
    }
    let name = e.change.path.strip_prefix("escalations/")?;
    let id = name.strip_suffix(".json").filter(|n| !n.contains('/') && !n.contains(".conflict-"))?;
    let ours = e.change.origin != Origin::Remote || node.is_some_and(|n| id.ends_with(&format!("-sync-{n}")));
    ours.then_some(id)
}

/// Text fit for an environment variable: no NUL, at most 4 KiB.
fn env_text(s: &str) -> String {
    let clean: String = s.chars().filter(|c| *c != '\0').collect();
    crate::output::truncate(&clean, 4096)
}

/// The one-line text of a notification.
pub fn text(entry: &review::EscalationFile) -> String {
    let e = &entry.escalation;
    let task = e.task_id.as_ref().map_or(String::new(), |t| format!(" (task {t})"));
    let approval = if e.requires_human_approval {
        " Needs approval: clawboard escalations show "
    } else {
        " See: clawboard escalations show "
    };
    format!("[{}] {} from {}{task}: {}.{approval}{}", e.level, "escalation", e.from, e.issue.trim(), entry.id)
}

impl Notifier {
    pub fn new(
        config: NotifyResolved,
        store: Store,
        counters: Arc<super::web::Counters>,
        node: Option<String>,
    ) -> anyhow::Result<Notifier> {
        // No redirects, no Referer: the URL may carry a bot token.
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .build()?;
        Ok(Notifier { config, store, counters, client, node })
    }

    async fn notify(&self, entry: review::EscalationFile) {
        let json = serde_json::to_vec(&entry.escalation).unwrap_or_default();
        if let Some(cmd) = &self.config.command {
            let r = self.with_retries("command", || self.run_command(cmd, &entry, &json)).await;
            self.done("command", &entry.id, r);
        }
        if let Some(url) = &self.config.webhook {
            let body = serde_json::json!({"text": text(&entry), "id": entry.id, "escalation": entry.escalation});
            let r = self.with_retries("webhook", || self.post(url, &body)).await;
            self.done("webhook", &entry.id, r);
        }
    }

    fn done(&self, what: &str, id: &str, r: Result<(), String>) {
        match r {
            Ok(()) => tracing::info!(escalation = %id, "notified by {what}"),
            Err(e) => {
                self.counters.notify_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(escalation = %id, "the notify {what} failed after {} retries: {e}", self.config.retries);
            }
        }
    }

    async fn with_retries<F, Fut>(&self, what: &str, mut op: F) -> Result<(), String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let backoff = Backoff::new(self.config.retry_delay, MAX_RETRY_WAIT.max(self.config.retry_delay));
        let mut attempt = 0;
        loop {
            match op().await {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= self.config.retries => return Err(e),
                Err(e) => {
                    let delay = backoff.delay(attempt);
                    attempt += 1;
                    tracing::warn!(
                        "the notify {what} failed ({e}); retry {attempt} of {} in {delay:?}",
                        self.config.retries
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn run_command(&self, cmd: &[String], entry: &review::EscalationFile, json: &[u8]) -> Result<(), String> {
        let (program, args) = cmd.split_first().ok_or("notify.command is empty")?;
        // The daemon's keys (the bucket's, GitHub's, a model's) stay out of it:
        // it is handed text that roles wrote.
        let mut child = clawboard_roles::runner::command_with_env(program, &self.config.pass_env)
            .args(args)
            .env("CLAWBOARD_ESCALATION_ID", &entry.id)
            .env("CLAWBOARD_ESCALATION_LEVEL", entry.escalation.level.as_str())
            .env("CLAWBOARD_ESCALATION_TEXT", env_text(&text(entry)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {program:?}: {e}"))?;
        let stdin = child.stdin.take();
        let run = async move {
            if let Some(mut stdin) = stdin {
                // A hook that does not read its stdin is fine (the write fails or fills the pipe).
                let _ = stdin.write_all(json).await;
            }
            child.wait_with_output().await
        };
        // One timeout for the write and the wait; the child is killed when `run` is dropped.
        let out = tokio::time::timeout(self.config.timeout, run)
            .await
            .map_err(|_| {
                format!("{program:?} ran longer than notify.timeout ({:?}) and was killed", self.config.timeout)
            })?
            .map_err(|e| format!("{program:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            Err(format!("{program:?} exited with {}: {}", out.status, crate::output::truncate(&err, 300)))
        }
    }

    async fn post(&self, url: &str, body: &serde_json::Value) -> Result<(), String> {
        let shown = host_only(url);
        let r =
            self.client.post(url).json(body).send().await.map_err(|e| format!("POST {shown}: {}", without_url(e)))?;
        if r.status().is_success() { Ok(()) } else { Err(format!("POST {shown}: HTTP {}", r.status())) }
    }
}

/// `https://host/…`: webhook URLs carry secrets in the path (a Telegram bot token).
pub fn host_only(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or(host);
    format!("{scheme}://{host}/…")
}

/// reqwest's error text without the URL, which may carry a bot token.
fn without_url(e: reqwest::Error) -> String {
    let source = std::error::Error::source(&e).map(ToString::to_string);
    let e = e.without_url();
    match source {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawboard_core::formats::{Escalation, Level};
    use clawboard_core::journal::Change;

    #[test]
    fn only_local_escalation_puts_are_notified() {
        let entry = |path: &str, kind, origin| Journaled {
            seq: 1,
            change: Change { path: path.into(), kind, origin, mtime_ns: None, size: None },
        };
        let of = |path: &str, kind, origin| escalation_of(&entry(path, kind, origin), Some("n1")).map(str::to_owned);
        assert_eq!(of("escalations/e1.json", ChangeKind::Put, Origin::Daemon).as_deref(), Some("e1"));
        assert_eq!(of("escalations/e1.json", ChangeKind::Put, Origin::Local).as_deref(), Some("e1"));
        assert_eq!(of("escalations/e1.json", ChangeKind::Put, Origin::Remote), None);
        assert_eq!(of("escalations/e1-sync-n1.json", ChangeKind::Put, Origin::Remote).as_deref(), Some("e1-sync-n1"));
        assert_eq!(of("escalations/e1-sync-n2.json", ChangeKind::Put, Origin::Remote), None);
        assert_eq!(of("escalations/e1.json", ChangeKind::Delete, Origin::Daemon), None);
        assert_eq!(of("escalations/e1.conflict-n-1.json", ChangeKind::Put, Origin::Daemon), None);
        assert_eq!(of("tasks/t/escalations/e1.json", ChangeKind::Put, Origin::Daemon), None);
        assert_eq!(env_text("a\0b"), "ab");
        assert_eq!(env_text(&"x".repeat(5000)).chars().count(), 4096);
    }

    // Real time, not paused: the hook is a real process, and while the runtime waits
    // for it a paused clock jumps to the next timer, the hook's timeout (seen under
    // load: the hook killed after it had written, counted as a failure).
    #[tokio::test]
    async fn the_cursor_waits_for_a_notification_being_sent_and_each_is_sent_once() {
        use crate::daemon::jobs::testing::{settings, setup, until};
        let s = setup();
        let out = s.root().join("notified");
        let config = format!(
            "[notify]\nlevels = [\"critical\"]\ncommand = [\"sh\", \"-c\", \"echo $CLAWBOARD_ESCALATION_ID >> {}\"]\ntimeout = \"1h\"\n",
            out.display()
        );
        let notify = settings(s.root(), &config).review.notify;
        let counters = Arc::new(crate::daemon::web::Counters::default());
        let mut n = Notifications::new(Notifier::new(notify, s.store.clone(), counters.clone(), None).unwrap());
        let raise = |level| {
            let id = escalations::new_id();
            let raised = clawboard_roles::output::RaisedEscalation {
                level,
                issue: "look".into(),
                suggested_action: None,
                requires_human_approval: false,
            };
            escalations::raise(&s.store, &id, "w", "t1", &raised).unwrap();
            id
        };
        let (critical, normal) = (raise(Level::Critical), raise(Level::Normal));
        let entry = |seq, path: String| Journaled {
            seq,
            change: Change { path, kind: ChangeKind::Put, origin: Origin::Daemon, mtime_ns: None, size: None },
        };
        let batch = vec![
            entry(4, format!("escalations/{critical}.json")),
            entry(6, format!("escalations/{normal}.json")),
            entry(7, "tasks/t1/task.json".into()),
        ];
        n.handle(batch).await.unwrap();
        assert_eq!(n.durable(9), 3, "not past the notification being sent");
        until("the hook", || std::fs::read_to_string(&out).is_ok_and(|t| t.ends_with('\n'))).await;
        n.wait_for_work().await;
        assert_eq!(n.durable(9), 9);
        // The same escalation written again (a decision, an edit) is not notified again.
        n.handle(vec![entry(10, format!("escalations/{critical}.json"))]).await.unwrap();
        assert!(n.sending.is_empty());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{critical}\n"), "only the critical level");
        assert_eq!(counters.notify_failures.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn webhook_urls_are_shown_without_secrets() {
        assert_eq!(
            host_only("https://api.telegram.org/bot123:ABC/sendMessage?chat_id=1"),
            "https://api.telegram.org/…"
        );
        assert_eq!(host_only("http://u:p@127.0.0.1:9/x"), "http://127.0.0.1:9/…");
    }

    #[test]
    fn the_text_names_level_source_task_and_command() {
        let e = review::EscalationFile {
            id: "e1".into(),
            escalation: Escalation {
                requires_human_approval: true,
                task_id: clawboard_core::Id::new("t1").ok(),
                ..Escalation::raised(Level::Critical, "deployer", "deploy to prod ")
            },
        };
        assert_eq!(
            text(&e),
            "[critical] escalation from deployer (task t1): deploy to prod. Needs approval: clawboard escalations show e1"
        );
    }
}
