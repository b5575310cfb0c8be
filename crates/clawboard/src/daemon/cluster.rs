//! Many nodes, one bucket: the claim of every task across nodes, heartbeats,
//! `shared/node-status.json`, taking over a silent node's tasks, and fencing.
//!
//! A task intake accepted is driven only after this node wins `_claims/{taskId}`;
//! a task this node had claimed is resumed after a restart only after its claim
//! is checked (another node may have taken it over meanwhile); the push loop starts
//! only after that check, so a node that lost a task never pushes into it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use clawboard_core::formats::{NodeState, NodeStatus};
use clawboard_core::lock::Lock;
use clawboard_core::{Id, RelPath, Store, Timestamp, layout};
use clawboard_roles::claims;
use clawboard_roles::engine::{BoxFuture, ClaimGuard, Hold};
use clawboard_sync::cluster::{ClaimResult, Heartbeat};
use clawboard_sync::{AnyRemote, Pull};
use tokio::sync::{Notify, watch};

use super::dispatch::Dispatcher;
use super::jobs::{JobResult, Worker};

/// A task intake accepted, waiting for its claim in the bucket.
#[derive(Debug, Clone, Copy, Default)]
struct ToClaim {
    /// A try failed already (the bucket unreachable): later failures are not logged again.
    failed_before: bool,
    /// Its `task.json` came from another node: losing the claim is expected, and
    /// there is nothing of this node's in it to fence.
    pulled: bool,
}

/// This node's membership in the cluster of nodes on one bucket: its claims
/// and heartbeat there (through `clawboard_sync::Cluster`), the tasks waiting for
/// a claim, the other nodes' heartbeats as seen, takeovers. Its jobs are
/// [`Claims`], [`AcceptedClaims`] and [`Beat`]; intake and lanes ask it before a
/// task or an entry is this node's to run.
pub struct Membership {
    /// Claims and heartbeats in the bucket.
    nodes: Arc<clawboard_sync::Cluster<AnyRemote>>,
    /// Brings the newest state before a takeover; raises escalations.
    pull: Arc<Pull<AnyRemote>>,
    pub dispatcher: Arc<Dispatcher>,
    pub store: Store,
    /// Accepted tasks to claim.
    to_claim: Lock<BTreeMap<String, ToClaim>>,
    /// Wakes the claims worker for them.
    claim_wake: Notify,
    /// Per other node: its heartbeat's ETag and since when (local time) it has not changed.
    seen: Lock<HashMap<String, (String, Instant)>>,
    /// Another process was found writing heartbeats under this node id (reported once).
    shared_id: std::sync::atomic::AtomicBool,
    /// Other nodes whose heartbeat went stale, as of the last beat, with the
    /// ETag of that heartbeat (a takeover checks it is still the same).
    stale: Lock<Vec<(Heartbeat, String)>>,
    /// Set once this node's claimed tasks were checked after start.
    pub checked: watch::Sender<bool>,
    /// Steps waiting for their records to be pushed (`sync.push_each_step`).
    pub steps: Arc<super::sync::StepPushes>,
}

impl Membership {
    pub fn new(
        nodes: Arc<clawboard_sync::Cluster<AnyRemote>>,
        pull: Arc<Pull<AnyRemote>>,
        dispatcher: Arc<Dispatcher>,
        store: Store,
    ) -> Arc<Membership> {
        let c = Arc::new(Membership {
            nodes,
            pull,
            dispatcher,
            store,
            to_claim: Lock::new(BTreeMap::new()),
            claim_wake: Notify::new(),
            seen: Lock::new(HashMap::new()),
            stale: Lock::new(Vec::new()),
            shared_id: std::sync::atomic::AtomicBool::new(false),
            checked: watch::channel(false).0,
            steps: Arc::default(),
        });
        // The engine acts on a claimed task only while this node holds its claim.
        c.dispatcher.engine.set_claim_guard(Arc::new(Guard(Arc::downgrade(&c))));
        c
    }

    /// Intake accepted `task`: the accepted-claims worker claims it across nodes at
    /// once, and drives it if this node won.
    pub fn accepted(&self, task: String, pulled: bool) {
        self.to_claim.lock().entry(task).or_insert(ToClaim { failed_before: false, pulled });
        self.claim_wake.notify_one();
    }

    /// Tries the claims of the accepted tasks, `sync.concurrency` at a time (a burst
    /// of dropped tasks is claimed before the push shows them to other nodes, which
    /// would claim them in turn); the ones the bucket cannot take yet stay waiting
    /// (the first failure of each is logged). True if some are still waiting.
    async fn claim_accepted(self: &Arc<Self>) -> bool {
        let waiting: Vec<(String, ToClaim)> = self.to_claim.lock().iter().map(|(t, f)| (t.clone(), *f)).collect();
        let limit = self.nodes.sync().settings().concurrency.max(1);
        let mut claims = tokio::task::JoinSet::new();
        let mut waiting = waiting.into_iter();
        loop {
            while claims.len() < limit {
                let Some((task, how)) = waiting.next() else { break };
                let c = self.clone();
                claims.spawn(async move {
                    let r = c.try_claim(&task, how.pulled).await;
                    (task, how, r)
                });
            }
            let Some(done) = claims.join_next().await else { break };
            let (task, how, r) = match done {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!("a claim panicked: {e}; retrying with the next heartbeat");
                    continue;
                }
            };
            match r {
                Ok(()) => {
                    self.to_claim.lock().remove(&task);
                }
                Err(e) if how.failed_before => tracing::debug!(task, "claim still not possible: {e:#}"),
                Err(e) => {
                    tracing::warn!(
                        task,
                        "cannot claim the task in the bucket yet ({e}); retrying with the next heartbeat"
                    );
                    self.to_claim.lock().insert(task, ToClaim { failed_before: true, ..how });
                }
            }
        }
        !self.to_claim.lock().is_empty()
    }

    /// Claims blackboard entry `id` across nodes (a lane handles it once).
    pub async fn claim_entry(&self, id: &str) -> anyhow::Result<ClaimResult> {
        Ok(self.nodes.claim_entry(id).await?)
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        self.nodes.sync().node()
    }

    async fn try_claim(&self, task: &str, pulled: bool) -> anyhow::Result<()> {
        match self.nodes.claim(task).await? {
            ClaimResult::Won { generation } => {
                tracing::info!(task, generation, "claimed");
                self.drive(task)?;
            }
            ClaimResult::Lost { owner } if pulled => {
                // Pulled from the node that runs it: nothing here to fence.
                tracing::debug!(task, owner, "a pulled task another node runs");
                claims::finish(&self.store, task)?;
            }
            ClaimResult::Lost { owner } => {
                // The same task taken in here too (dropped into two inboxes): the
                // owner's files are the task's. Fenced, this node never pushes its
                // own copy into the task's directory, and takes the owner's.
                tracing::info!(task, owner, "claimed by another node");
                self.fence(task, &owner).await?;
            }
        }
        Ok(())
    }

    /// This node holds `task`: unfenced if it was, claimed locally, driven.
    fn drive(&self, task: &str) -> anyhow::Result<()> {
        self.nodes.unfence(task)?;
        self.dispatcher.engine.unfence(task);
        claims::adopt(&self.store, task)?;
        self.dispatcher.enqueue(task.to_owned());
        Ok(())
    }

    /// Checks every task this node had claimed: resumes the ones it still holds
    /// (each claim renewed with `If-Match`, after this process's first heartbeat
    /// landed: see `clawboard_sync::lease`), fences the ones another node took over.
    /// A bucket that cannot be reached is an error (retried); a claim that cannot be
    /// read leaves that task waiting (logged, checked again with every heartbeat)
    /// without holding back the others.
    async fn check_active(&self) -> anyhow::Result<()> {
        // After this process's first heartbeat (retried by its own worker) landed.
        let lease = &self.nodes.sync().lease;
        while !lease.live() {
            let mut changed = lease.subscribe();
            if lease.live() {
                break;
            }
            // The sender lives as long as the lease; an error cannot happen here.
            let _ = changed.changed().await;
        }
        for task in claims::active(&self.store)? {
            match self.nodes.renew(&task).await {
                Ok(ClaimResult::Won { .. }) => self.drive(&task)?,
                Ok(ClaimResult::Lost { owner }) => self.fence(&task, &owner).await?,
                Err(e @ (clawboard_sync::Error::Remote(_) | clawboard_sync::Error::At { .. })) => return Err(e.into()),
                Err(e) => tracing::error!(task, "cannot check this task's claim, so it waits: {e}"),
            }
        }
        Ok(())
    }

    /// What the engine may do with `task` now, from what this node knows; `None`
    /// for a task this node never claimed across nodes (nothing to hold).
    fn hold(&self, task: &str) -> Option<Hold> {
        let root = self.store.root();
        if clawboard_sync::node::is_fenced(root, task) {
            return Some(Hold::Lost);
        }
        clawboard_sync::node::held_generation(root, task)?;
        Some(if self.nodes.sync().lease.holds(task) { Hold::Yes } else { Hold::Wait })
    }

    /// Whether this node still holds `task`, before a role's result or the task's
    /// end is written. A claim confirmed under a live lease is this node's: no
    /// other node takes it over before this node's heartbeat is older than the
    /// lease (`clawboard_sync::lease`), so the bucket is not asked on every step
    /// (on R2 that would be a round trip per step). Otherwise the bucket is asked,
    /// and the task is fenced if another node holds it.
    async fn confirm(&self, task: &str) -> Hold {
        match self.hold(task) {
            None | Some(Hold::Yes) => return Hold::Yes,
            Some(Hold::Lost) => return Hold::Lost,
            Some(Hold::Wait) => {}
        }
        let live = || if self.nodes.sync().lease.holds(task) { Hold::Yes } else { Hold::Wait };
        match self.nodes.claim_of(task).await {
            Ok(Some((doc, _))) if doc.node == self.node() => live(),
            Ok(Some((doc, _))) => {
                if let Err(e) = self.fence(task, &doc.node).await {
                    tracing::error!(task, "cannot fence the task: {e:#}");
                }
                Hold::Lost
            }
            // Gone from the bucket: the next claim check makes it again.
            Ok(None) => Hold::Wait,
            Err(e) => {
                tracing::warn!(task, "cannot read the task's claim; the lease decides: {e}");
                live()
            }
        }
    }

    /// Marker first, then the local claim: a crash in between leaves the task fenced.
    async fn fence(&self, task: &str, owner: &str) -> anyhow::Result<()> {
        tracing::warn!(task, owner, "another node holds this task now; stopping it here without writing to it");
        self.dispatcher.engine.fence(task);
        self.nodes.fence(task).await?;
        claims::finish(&self.store, task)?;
        Ok(())
    }

    async fn beat(&self) -> anyhow::Result<()> {
        let mut running: Vec<String> =
            self.dispatcher.engine.running_instances().into_iter().map(|i| i.task_id).collect();
        running.sort();
        running.dedup();
        let beat = Heartbeat {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()),
            pid: std::process::id(),
            running_tasks: running,
            active_tasks: claims::active(&self.store)?,
            ..Heartbeat::default()
        };
        if !self.nodes.heartbeat(beat).await? && !self.shared_id.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let issue = format!(
                "another process writes heartbeats as node {}: two machines share this node id (a cloned machine \
                 or a copied .clawboard/?). Give each machine its own [node] id (or delete .clawboard/node-id on \
                 the copy) and restart it; until then both may run the same tasks.",
                self.nodes.sync().node()
            );
            tracing::error!("cluster: {issue}");
            self.pull.raise(&issue).await?;
        }
        let beats = self.nodes.heartbeats().await?;
        let lease = self.nodes.sync().settings().lease;
        let mut stale = Vec::new();
        {
            let mut seen = self.seen.lock();
            for (b, etag) in &beats {
                let entry = seen.entry(b.node.clone()).or_insert_with(|| (etag.clone(), Instant::now()));
                if entry.0 != *etag {
                    *entry = (etag.clone(), Instant::now());
                }
                if b.node != self.nodes.sync().node() && entry.1.elapsed() >= b.lease_for_takers(lease) {
                    stale.push((b.clone(), etag.clone()));
                }
            }
        }
        self.write_node_status(&beats, &stale)?;
        *self.stale.lock() = stale;
        Ok(())
    }

    /// One round of the claims worker: retry waiting claims, check own claims (a
    /// claim not confirmed in the lease's current epoch is renewed), take over stale
    /// nodes' tasks. One task's trouble is logged and does not stop the rest.
    async fn tick(&self) -> anyhow::Result<()> {
        let lease = &self.nodes.sync().lease;
        for task in claims::active(&self.store)? {
            let checked = if lease.live() && !lease.confirmed(&task) {
                self.nodes.renew(&task).await
            } else {
                self.nodes.check_claim(&task).await
            };
            match checked {
                Ok(ClaimResult::Lost { owner }) => {
                    if let Err(e) = self.fence(&task, &owner).await {
                        tracing::error!(task, "cannot fence the task: {e:#}");
                    }
                }
                Ok(ClaimResult::Won { .. }) => {}
                Err(e) => tracing::warn!(task, "cannot check this task's claim: {e}"),
            }
        }
        let stale = self.stale.lock().clone();
        for (b, etag) in stale {
            self.take_over(&b, &etag).await?;
        }
        Ok(())
    }

    /// Takes over the unfinished tasks of a node whose heartbeat (`beat_etag`) went stale.
    async fn take_over(&self, dead: &Heartbeat, beat_etag: &str) -> anyhow::Result<()> {
        let mine = claims::active(&self.store)?;
        let candidates: Vec<&String> =
            dead.active_tasks.iter().filter(|t| clawboard_core::check_id(t).is_ok() && !mine.contains(t)).collect();
        if candidates.is_empty() {
            return Ok(());
        }
        // Resume from the newest state the bucket has, not from what this node last pulled.
        self.pull.pull(false).await?;
        for task in candidates {
            let rel = RelPath::new(&layout::task_file(task, layout::TASK_FILE))?;
            let finished = match self.store.read::<clawboard_core::formats::Task>(&rel) {
                Ok(t) => matches!(
                    t.status,
                    clawboard_core::formats::TaskStatus::Completed | clawboard_core::formats::TaskStatus::Failed
                ),
                Err(_) => continue, // not here yet: the next pull brings it, the next heartbeat retries
            };
            if finished {
                continue;
            }
            if let Some(ClaimResult::Won { generation }) = self.nodes.take_over(task, &dead.node, beat_etag).await? {
                tracing::warn!(task, from = %dead.node, generation, "took over a task from a node that stopped heart-beating");
                self.dispatcher.engine.taken_over(task, &dead.node, generation);
                self.drive(task)?;
            }
        }
        Ok(())
    }

    fn write_node_status(&self, beats: &[(Heartbeat, String)], stale: &[(Heartbeat, String)]) -> anyhow::Result<()> {
        let mut status = NodeStatus::default();
        for (b, _) in beats {
            let Ok(id) = Id::new(b.node.clone()) else { continue };
            let mut extra = serde_json::Map::new();
            extra.insert("activeTasks".into(), serde_json::json!(b.active_tasks));
            let state = if stale.iter().any(|(s, _)| s.node == b.node) { "stale" } else { "alive" };
            extra.insert("state".into(), serde_json::json!(state));
            status.nodes.insert(
                id,
                NodeState {
                    last_seen: Timestamp::parse(&b.seen_at).unwrap_or_else(|_| Timestamp::now()),
                    version: Some(b.version.clone()),
                    hostname: b.hostname.clone(),
                    running_tasks: b.running_tasks.iter().filter_map(|t| Id::new(t.clone()).ok()).collect(),
                    extra,
                },
            );
        }
        let rel = RelPath::new("shared/node-status.json")?;
        if self.store.read::<NodeStatus>(&rel).ok().as_ref() != Some(&status) {
            self.store.write_json(&rel, &status)?;
        }
        Ok(())
    }
}

/// The engine's view of this node's claims (`clawboard_roles::engine::guard`).
/// Weak: the engine outlives no cluster, and the cluster holds the engine.
pub struct Guard(pub std::sync::Weak<Membership>);

impl ClaimGuard for Guard {
    fn hold(&self, task_id: &str) -> Hold {
        self.0.upgrade().map_or(Hold::Wait, |c| c.hold(task_id).unwrap_or(Hold::Yes))
    }

    fn confirm<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Hold> {
        let cluster = self.0.upgrade();
        Box::pin(async move {
            match cluster {
                Some(c) => c.confirm(task_id).await,
                None => Hold::Wait,
            }
        })
    }

    fn step_done<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, ()> {
        let cluster = self.0.upgrade();
        Box::pin(async move {
            let Some(c) = cluster.filter(|c| c.nodes.sync().settings().push_each_step) else { return };
            if c.hold(task_id).is_none() {
                return;
            }
            // The step's records on disk (and so in the journal) before the push.
            c.store.settle();
            c.steps.pushed().await;
        })
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        let rx = self.0.upgrade().map(|c| c.nodes.sync().lease.subscribe());
        Box::pin(async move {
            match rx {
                Some(mut rx) => {
                    let _ = rx.changed().await;
                }
                None => std::future::pending().await,
            }
        })
    }
}

/// Checks this node's claims once at start (nothing is pushed, pulled or resumed
/// before), then every `sync.heartbeat`: this node's claims, and stale nodes' tasks.
pub struct Claims {
    cluster: Arc<Membership>,
    next: tokio::time::Instant,
}

impl Claims {
    pub fn new(cluster: Arc<Membership>) -> Claims {
        Claims { cluster, next: tokio::time::Instant::now() }
    }
}

impl Worker for Claims {
    async fn wait_for_work(&mut self) {
        tokio::time::sleep_until(self.next).await
    }

    async fn work(&mut self) -> JobResult {
        let c = &self.cluster;
        self.next = tokio::time::Instant::now() + c.nodes.sync().settings().heartbeat;
        if !*c.checked.borrow() {
            c.check_active().await.map_err(|e| anyhow::anyhow!("cluster: checking this node's claims: {e:#}"))?;
            c.checked.send_replace(true);
        }
        c.tick().await.map_err(|e| anyhow::anyhow!("cluster: {e:#} (retrying with the next heartbeat)"))?;
        Ok(())
    }
}

/// Claims the tasks intake accepted as soon as it accepts them (on its own, so a
/// long claim check never holds them back), and retries the ones the bucket could
/// not take every `sync.heartbeat`.
pub struct AcceptedClaims {
    cluster: Arc<Membership>,
    retry: Option<tokio::time::Instant>,
}

impl AcceptedClaims {
    pub fn new(cluster: Arc<Membership>) -> AcceptedClaims {
        AcceptedClaims { cluster, retry: None }
    }
}

impl Worker for AcceptedClaims {
    async fn wait_for_work(&mut self) {
        tokio::select! {
            () = self.cluster.claim_wake.notified() => {}
            () = super::jobs::sleep_until_some(self.retry) => {}
        }
    }

    async fn work(&mut self) -> JobResult {
        let waiting = self.cluster.claim_accepted().await;
        self.retry = waiting.then(|| tokio::time::Instant::now() + self.cluster.nodes.sync().settings().heartbeat);
        Ok(())
    }
}

/// Writes this node's heartbeat and folds everyone's into `shared/node-status.json`,
/// every `sync.heartbeat`; on its own, so a slow pull or claim check never holds it back.
pub struct Beat {
    cluster: Arc<Membership>,
    next: tokio::time::Instant,
}

impl Beat {
    pub fn new(cluster: Arc<Membership>) -> Beat {
        Beat { cluster, next: tokio::time::Instant::now() }
    }
}

impl Worker for Beat {
    async fn wait_for_work(&mut self) {
        tokio::time::sleep_until(self.next).await
    }

    async fn work(&mut self) -> JobResult {
        let every = self.cluster.nodes.sync().settings().heartbeat;
        self.next = tokio::time::Instant::now() + every;
        self.cluster
            .beat()
            .await
            .map_err(|e| anyhow::anyhow!("cluster: heartbeat failed (retrying every {every:?}): {e:#}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::daemon::jobs::testing::{client, dispatcher, setup, until};

    #[tokio::test(start_paused = true)]
    async fn claims_are_checked_first_then_accepted_tasks_claimed_at_once_and_heartbeats_go_out_every_beat() {
        let bucket = tempfile::tempdir().unwrap();
        let mut s = setup();
        let p = client(&s, "n1", bucket.path(), "heartbeat = \"2s\"\nlease = \"4s\"\n");
        let d = dispatcher(&s);
        let c = Membership::new(p.cluster, p.pull, d.clone(), s.store.clone());
        let mut checked = c.checked.subscribe();
        s.runner.worker("claims", Claims::new(c.clone()));
        s.runner.worker("accepted-claims", AcceptedClaims::new(c.clone()));
        s.runner.worker("heartbeat", Beat::new(c.clone()));
        checked.wait_for(|c| *c).await.unwrap();
        until("the first heartbeat", || s.rounds("heartbeat") == 1).await;
        until("the node status", || s.root().join("shared/node-status.json").exists()).await;
        let status = std::fs::read_to_string(s.root().join("shared/node-status.json")).unwrap();
        assert!(status.contains("\"n1\""), "{status}");
        c.accepted("t1".into(), false);
        until("t1 claimed and queued", || d.stats().waiting == 1).await;
        assert_eq!(claims::active(&s.store).unwrap(), ["t1"]);
        assert_eq!(s.rounds("accepted-claims"), 1);
        assert_eq!(s.rounds("claims"), 1, "the claim did not wait for the next beat");
        tokio::time::sleep(Duration::from_millis(4_100)).await;
        until("two more heartbeats", || s.rounds("heartbeat") == 3).await;
        until("two more claim rounds", || s.rounds("claims") == 3).await;
        assert_eq!(s.rounds("accepted-claims"), 1, "nothing left to retry");
        assert!(!s.failing("heartbeat") && !s.failing("claims") && !s.failing("accepted-claims"));
        s.stop().await;
    }

    #[tokio::test]
    async fn a_claim_under_a_live_lease_is_confirmed_without_the_bucket_and_a_lapsed_one_by_it() {
        let bucket = tempfile::tempdir().unwrap();
        let s = setup();
        let p = client(&s, "n1", bucket.path(), "heartbeat = \"1s\"\nlease = \"2s\"\n");
        let c = Membership::new(p.cluster, p.pull, dispatcher(&s), s.store.clone());
        c.beat().await.unwrap();
        let beat = std::fs::read_to_string(bucket.path().join("_nodes/n1.json")).unwrap();
        assert!(beat.contains("\"leaseMs\": 2000"), "the heartbeat names the lease:\n{beat}");
        assert!(matches!(c.nodes.claim("t1").await.unwrap(), ClaimResult::Won { generation: 1 }));
        let gets = || c.nodes.sync().counts.get.load(std::sync::atomic::Ordering::Relaxed);
        let before = gets();
        assert_eq!(c.confirm("t1").await, Hold::Yes);
        assert_eq!(gets(), before, "the lease proved the claim; the bucket was not read");
        assert_eq!(c.confirm("never-claimed").await, Hold::Yes, "a task without a claim is not held back");

        // Another node holds the claim now, and this node's lease has lapsed
        // (no heartbeat for longer than its usable part, 2 s less 250 ms).
        let theirs: &[u8] =
            br#"{"taskId":"t1","node":"n2","generation":2,"claimedAt":"2026-11-29T00:00:00Z","takenFrom":"n1"}"#;
        let (body, meta) =
            (clawboard_sync::remote::Body::Bytes(theirs.to_vec().into()), clawboard_sync::remote::hashed(theirs));
        let remote = c.nodes.sync().remote();
        clawboard_sync::Remote::put(remote, "_claims/t1", body, &meta, &clawboard_sync::remote::Condition::None)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        assert_eq!(c.confirm("t1").await, Hold::Lost);
        assert!(gets() > before, "the bucket was read");
        assert!(clawboard_sync::node::is_fenced(s.root(), "t1"), "fenced");
    }

    #[test]
    fn takers_wait_the_longer_of_their_lease_and_the_heartbeats() {
        let beat = |ms| Heartbeat { lease_ms: ms, ..Heartbeat::default() };
        let own = Duration::from_secs(120);
        assert_eq!(beat(None).lease_for_takers(own), own, "an older node's beat names none");
        assert_eq!(beat(Some(300_000)).lease_for_takers(own), Duration::from_secs(300));
        assert_eq!(beat(Some(4_000)).lease_for_takers(own), own);
    }
}
