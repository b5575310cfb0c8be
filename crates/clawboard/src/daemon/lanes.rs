//! The lanes consumer of the journal (cursor `lanes`): an entry written to
//! `entries/{project}/{id}.json` (by a person, the API, a role's output, another
//! node) that a lane picks is claimed, marked `in_progress`, handed to its role,
//! and the role's output applied (see `clawboard_entries::handling` for the
//! durable steps). Entries run concurrently, each in this consumer's own
//! `JoinSet`; the cursor stays below the entry of every one not yet handled, so a
//! crash replays it and the handling resumes where it stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clawboard_core::Store;
use clawboard_core::journal::{ChangeKind, Journaled as Change};
use clawboard_entries::handling::{self, Handling, State};
use clawboard_entries::{LaneOutput, Lanes, Pick};
use clawboard_roles::Engine;
use clawboard_roles::engine::entry::{EntryCall, EntryRun};
use clawboard_roles::reply::ReplyShape;
use clawboard_sync::cluster::ClaimResult;
use tokio::task::JoinSet;

use super::Parts;
use super::cluster::Membership;
use super::jobs::{Consumer, JobError, JobResult, Runner};

pub const CURSOR: &str = "lanes";

/// A failed handling (the bucket unreachable for a claim, a full disk) is tried
/// again after this.
const RETRY: Duration = Duration::from_secs(5);

/// How far a handling went.
#[derive(Debug, PartialEq)]
enum Handled {
    /// As far as it goes (handled, or not this node's).
    Done,
    /// Stopped by the daemon's stop: the entry stays pending (a restart replays it).
    Stopped,
}

/// The lanes consumer. Always on, lanes or not: a reload may add lanes, and with
/// none an entry is looked at and left.
pub fn install(jobs: &mut Runner, p: &Parts, cluster: Option<Arc<Membership>>) {
    let engine = p.dispatcher.engine.clone();
    jobs.consumer(CURSOR, LaneConsumer::new(p.store.clone(), engine, cluster, p.settings.daemon.shutdown_grace));
}

pub struct LaneConsumer {
    ctx: Arc<Ctx>,
    /// Entries being handled: id -> the journal entry that started it.
    pending: BTreeMap<String, u64>,
    /// Entries journaled again while being handled (retention removed one and a
    /// counter gave its id again, a person edited it): handled once more after.
    again: std::collections::BTreeSet<String>,
    running: JoinSet<(String, anyhow::Result<Handled>)>,
    grace: Duration,
    /// The daemon is stopping: a failed handling is not tried again.
    stopping: bool,
    /// The last handling that failed (or panicked), for [`Consumer::work`] to
    /// hand to the job runner, which counts and logs it.
    failed: Option<anyhow::Error>,
}

struct Ctx {
    store: Store,
    /// Its config holds the lanes (a reload takes effect at the next entry).
    engine: Arc<Engine>,
    cluster: Option<Arc<Membership>>,
    /// This node's id with several nodes: part of the ids of the entries it makes.
    node: Option<String>,
    /// The ids of the plans not yet applied, taken one plan at a time, so two entries
    /// handled at once never pick the same new id. It starts with the plans a crash
    /// left unapplied, which their replays apply beside handlings that plan anew;
    /// read from the records at its first use (see [`Ctx::planning`]), not at start.
    planning: tokio::sync::Mutex<Option<std::collections::BTreeSet<String>>>,
}

impl LaneConsumer {
    /// `grace`: how long the daemon's stop waits for handlings under way
    /// (`daemon.shutdown_grace`, as for tasks).
    pub fn new(store: Store, engine: Arc<Engine>, cluster: Option<Arc<Membership>>, grace: Duration) -> LaneConsumer {
        LaneConsumer {
            ctx: Arc::new(Ctx {
                store,
                engine,
                node: cluster.as_ref().map(|c| c.node().to_owned()),
                cluster,
                planning: tokio::sync::Mutex::new(None),
            }),
            pending: BTreeMap::new(),
            again: std::collections::BTreeSet::new(),
            running: JoinSet::new(),
            grace,
            stopping: false,
            failed: None,
        }
    }

    fn start(&mut self, id: String, seq: u64, delay: Duration) {
        if self.pending.contains_key(&id) {
            // Looked at again once this handling ends; its journal entry stays the
            // cursor's bound meanwhile (the earlier one, below it, already is).
            self.again.insert(id);
            return;
        }
        self.pending.insert(id.clone(), seq);
        let ctx = self.ctx.clone();
        self.running.spawn(async move {
            tokio::time::sleep(delay).await;
            let r = ctx.handle(&id).await;
            (id, r)
        });
    }
}

/// The entry id of a journal entry about an entry file.
fn entry_id(c: &Change) -> Option<String> {
    if c.change.kind != ChangeKind::Put {
        return None;
    }
    match c.change.path.split('/').collect::<Vec<_>>().as_slice() {
        [clawboard_core::layout::ENTRIES, _, name] => name.strip_suffix(".json").map(str::to_owned),
        _ => None,
    }
}

impl Consumer for LaneConsumer {
    async fn handle(&mut self, batch: Vec<Change>) -> JobResult {
        for c in &batch {
            if let Some(id) = entry_id(c) {
                self.start(id, c.seq, Duration::ZERO);
            }
        }
        Ok(())
    }

    /// Never at or past the entry of one still being handled.
    fn durable(&self, handled: u64) -> u64 {
        self.pending.values().map(|s| s.saturating_sub(1)).fold(handled, u64::min)
    }

    async fn wait_for_work(&mut self) {
        if self.running.is_empty() {
            return std::future::pending().await;
        }
        // join_next is cancel safe: a finished handling waits for the next call.
        if let Some(done) = self.running.join_next().await {
            let (id, r) = match done {
                Ok(d) => d,
                Err(e) if e.is_cancelled() => return,
                Err(e) => {
                    // A panic in one handling: the daemon goes on; the entry waits for a restart.
                    self.failed = Some(anyhow::anyhow!(
                        "a lane handling panicked (its entry is handled again at the next start): {e}"
                    ));
                    return;
                }
            };
            match r {
                Ok(Handled::Done) => {
                    let seq = self.pending.remove(&id).unwrap_or_default();
                    if self.again.remove(&id) {
                        if self.stopping {
                            // A change not looked at: it stays pending, for the next start.
                            self.pending.insert(id, seq);
                        } else {
                            self.start(id, seq, Duration::ZERO);
                        }
                    }
                }
                Ok(Handled::Stopped) => {}
                Err(e) if self.stopping => {
                    tracing::warn!(entry = id, "lane: {e:#}; handled again at the next start");
                }
                Err(e) => {
                    self.failed = Some(e.context(format!("entry {id} (tried again in {RETRY:?})")));
                    self.again.remove(&id);
                    let seq = self.pending.remove(&id).unwrap_or_default();
                    self.start(id, seq, RETRY);
                }
            }
        }
    }

    /// A handling that failed is the round's error: the runner counts and logs it.
    async fn work(&mut self) -> JobResult {
        match self.failed.take() {
            Some(e) => Err(JobError::Retry(e)),
            None => Ok(()),
        }
    }

    /// Handlings under way get `daemon.shutdown_grace` to end, as task drives
    /// do: a role run in progress finishes and its output is applied. What is
    /// still running after it is dropped (its role's processes killed); those
    /// entries stay pending, and the next start handles them again.
    async fn stop(&mut self) {
        self.stopping = true;
        let drained = tokio::time::timeout(self.grace, async {
            while !self.running.is_empty() {
                self.wait_for_work().await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                running = self.running.len(),
                grace = ?self.grace,
                "lane handlings still running after the grace period; stopping them (handled again at the next start)"
            );
            self.running.abort_all();
        }
    }
}

impl Ctx {
    /// Handles entry `id` as far as it goes: every step found done is skipped.
    async fn handle(&self, id: &str) -> anyhow::Result<Handled> {
        let store = self.store.clone();
        // One version of the lanes for the whole handling.
        let lanes = self.engine.config().lanes.clone();
        let looked = {
            let (id, lanes) = (id.to_owned(), lanes.clone());
            tokio::task::spawn_blocking(move || look(&store, &lanes, &id)).await??
        };
        let Some((entry, pick, record)) = looked else { return Ok(Handled::Done) };
        let mut h = match record {
            Some(h) => h,
            None => {
                let Some(h) = self.claim(&entry, &pick).await? else { return Ok(Handled::Done) };
                h
            }
        };
        if h.state == State::Lost || h.state == State::Applied {
            return Ok(Handled::Done);
        }
        let store = self.store.clone();
        let begun = {
            let (store, pick) = (store.clone(), pick.clone());
            tokio::task::spawn_blocking(move || handling::begin(&store, entry, &pick, chrono::Utc::now())).await??
        };
        if begun.status.is_final() {
            // A person closed it meanwhile: nothing to run.
            tracing::info!(entry = id, status = %begun.status, "entry closed before its role ran");
            h.state = State::Applied;
            handling::save(&store, &h)?;
            return Ok(Handled::Done);
        }
        if h.state == State::Claimed {
            self.run(&begun, &lanes, &pick, &mut h).await?;
            if h.state == State::Claimed {
                return Ok(Handled::Stopped);
            }
        }
        let (store, pick) = (store.clone(), pick.clone());
        let planned: Vec<String> = h.planned.iter().map(|p| p.id.to_string()).collect();
        let node = self.node.clone();
        tokio::task::spawn_blocking(move || {
            handling::apply(&store, &mut h, &pick, node.as_deref(), chrono::Utc::now())
        })
        .await?
        .with_context(|| format!("applying the output for entry {id}"))?;
        let mut reserved = self.planning().await;
        for p in &planned {
            reserved.remove(p);
        }
        tracing::info!(entry = id, "entry handled");
        Ok(Handled::Done)
    }

    /// The ids of the plans not yet applied, locked. The first use reads the plans
    /// a crash left (every `ran` record) off the daemon's start, once.
    async fn planning(&self) -> tokio::sync::MappedMutexGuard<'_, std::collections::BTreeSet<String>> {
        let mut set = self.planning.lock().await;
        if set.is_none() {
            let store = self.store.clone();
            let found = tokio::task::spawn_blocking(move || handling::unapplied(&store)).await;
            let ids = match found.map_err(anyhow::Error::from).and_then(|r| r.map_err(anyhow::Error::from)) {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "the plans a crash left unapplied could not be read; a new entry that takes one of their ids is found when the plan is applied, and the plan's entry gets a new id"
                    );
                    Vec::new()
                }
            };
            *set = Some(ids.into_iter().collect());
        }
        tokio::sync::MutexGuard::map(set, |s| s.get_or_insert_default())
    }

    /// Claims the entry (across nodes first, with several); `None` if another node
    /// holds it or it is not open any more.
    async fn claim(&self, entry: &clawboard_entries::Entry, pick: &Pick) -> anyhow::Result<Option<Handling>> {
        if entry.status != clawboard_entries::EntryStatus::Open {
            return Ok(None);
        }
        let mut owner = None;
        if let Some(c) = &self.cluster {
            match c.claim_entry(entry.id.as_str()).await? {
                ClaimResult::Won { .. } => owner = Some(c.node().to_owned()),
                ClaimResult::Lost { owner } => {
                    tracing::debug!(entry = %entry.id, owner, "entry claimed by another node");
                    handling::claim(&self.store, &Handling::new(entry, pick, State::Lost, Some(owner)))?;
                    return Ok(None);
                }
            }
        }
        let h = Handling::new(entry, pick, State::Claimed, owner);
        if !handling::claim(&self.store, &h)? {
            // Claimed before (a replay): the record says where it stands.
            return Ok(handling::load(&self.store, entry.id.as_str())?);
        }
        tracing::info!(entry = %entry.id, actor = pick.actor, role = pick.config.role, "entry claimed");
        Ok(Some(h))
    }

    /// What the actor's reply must look like (for an `llm` role): entries of its
    /// allowed kinds, each to an actor of the lane that picks the kind (or `Human`,
    /// when none does), and the handled entry's documents when it writes them.
    fn reply_shape(lanes: &Lanes, entry: &clawboard_entries::Entry, pick: &Pick) -> ReplyShape {
        let actors = lanes.iter().filter(|(name, _)| **name == pick.lane).flat_map(|(_, l)| l.actors.iter());
        let actors: Vec<(&String, &clawboard_entries::ActorConfig)> = actors.collect();
        let kinds: Vec<(String, Vec<String>)> = pick
            .config
            .allowed_kinds
            .iter()
            .map(|kind| {
                let mut to: Vec<String> = actors
                    .iter()
                    .filter(|(_, a)| a.picks.is_empty() || a.picks.contains(kind))
                    .map(|(name, _)| (*name).clone())
                    .collect();
                if to.is_empty() {
                    to.push(clawboard_entries::HUMAN.to_owned());
                }
                (kind.clone(), to)
            })
            .collect();
        let docs: Vec<String> = if pick.config.writes_docs {
            entry.target_docs.iter().map(|d| d.path().to_owned()).collect()
        } else {
            Vec::new()
        };
        clawboard_roles::reply::lane_actor(&kinds, &docs)
    }

    /// Runs the role (its retries and fallbacks, each attempt recorded) and
    /// records its checked output and plan (`ran`); a role that keeps failing is
    /// recorded as an `error` output with the reason. The role is handed only the
    /// docs its access rules let it read.
    async fn run(
        &self,
        entry: &clawboard_entries::Entry,
        lanes: &Lanes,
        pick: &Pick,
        h: &mut Handling,
    ) -> anyhow::Result<()> {
        let role = pick.config.role.as_str();
        let may_read = |path: &str| self.engine.may_read(role, "", path);
        let call = EntryCall {
            role,
            entry_id: &entry.id,
            step: format!("{}/{}", pick.lane, pick.actor),
            context: handling::context(&self.store, entry, pick, &may_read),
            shape: Self::reply_shape(lanes, entry, pick),
        };
        let check = |stdout: &[u8]| LaneOutput::parse(stdout).and_then(|o| o.check(entry, pick));
        let run = self
            .engine
            .run_for_entry(call, check)
            .await
            .with_context(|| format!("running the role for entry {}", entry.id))?;
        let (output, runs) = match run {
            EntryRun::Stopped => return Ok(()),
            EntryRun::Done { stdout, runs } => (LaneOutput::parse(&stdout).map_err(anyhow::Error::msg)?, runs),
            EntryRun::Failed { error, runs } => {
                let note = format!("{} could not handle it: {error}", pick.actor);
                (
                    LaneOutput {
                        status: Some(clawboard_entries::EntryStatus::Error),
                        note: Some(note),
                        ..Default::default()
                    },
                    runs,
                )
            }
        };
        let mut reserved = self.planning().await;
        let store = self.store.clone();
        let (entry, pick, mut record) = (entry.clone(), pick.clone(), h.clone());
        let taken: Vec<String> = reserved.iter().cloned().collect();
        let node = self.node.clone();
        let record = tokio::task::spawn_blocking(move || -> anyhow::Result<Handling> {
            let reserved = taken;
            record.planned =
                handling::plan(&store, &entry, &pick, &output, &reserved, node.as_deref(), chrono::Utc::now())?;
            record.output = Some(output);
            record.runs = runs;
            record.state = State::Ran;
            handling::save(&store, &record)?;
            Ok(record)
        })
        .await??;
        reserved.extend(record.planned.iter().map(|p| p.id.to_string()));
        *h = record;
        Ok(())
    }
}

/// The entry, the lane that picks it and this node's record, if a lane picks it.
fn look(
    store: &Store,
    lanes: &Lanes,
    id: &str,
) -> anyhow::Result<Option<(clawboard_entries::Entry, Pick, Option<Handling>)>> {
    let entry = match clawboard_entries::read(store, id) {
        Ok((_, e)) => e,
        Err(clawboard_entries::Error::NotFound(_)) => return Ok(None),
        Err(e) if e.is_bad_input() => {
            // `clawboard validate` and the review page show a broken entry; a lane skips it.
            tracing::warn!(entry = id, "lane: skipping an entry that does not read: {e}");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let Some(pick) = lanes.pick(&entry) else { return Ok(None) };
    let record = handling::load_for(store, &entry)?;
    Ok(Some((entry, pick, record)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::jobs::testing::{settings, setup, until};

    /// Role `bot` (a shell that notes each run in `runs`, waits `before`, prints
    /// `out`) as lane `l`'s actor Bot.
    fn bot_config(root: &std::path::Path, before: &str, out: &str) -> String {
        format!(
            "[roles.bot]\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; echo run >> {runs}; {before}printf '%s' '{out}'\"]\n\
             [lanes.l.actors.Bot]\nrole = \"bot\"\nallowed_kinds = [\"answer\"]\n",
            runs = root.join("runs").display(),
            out = out.replace('"', "\\\""),
        )
    }

    /// A lane consumer with `config` (its roles and lanes).
    fn lane_consumer(s: &crate::daemon::jobs::testing::Setup, config: &str, grace: Duration) -> LaneConsumer {
        let cfg = settings(s.root(), config);
        let config = clawboard_roles::EngineConfig { lanes: Arc::new(cfg.lanes), ..cfg.roles.into() };
        let engine = Arc::new(Engine::new(s.store.clone(), config, clawboard_roles::Shutdown::never()));
        LaneConsumer::new(s.store.clone(), engine, None, grace)
    }

    /// Runs the lane consumer with `config` (its roles and lanes).
    fn start_consumer(s: &mut crate::daemon::jobs::testing::Setup, config: &str, grace: Duration) {
        let consumer = lane_consumer(s, config, grace);
        s.runner.consumer(CURSOR, consumer);
    }

    /// Runs the lane consumer with `config`, and creates the seed's doc-update
    /// entry addressed to Bot (not journaled yet).
    fn consume_an_entry_to_bot(
        s: &mut crate::daemon::jobs::testing::Setup,
        config: &str,
        grace: Duration,
    ) -> clawboard_entries::Entry {
        start_consumer(s, config, grace);
        let mut e: clawboard_entries::Entry = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"
        ))
        .unwrap();
        e.to = "Bot".into();
        clawboard_entries::create(&s.store, &e).unwrap();
        e
    }

    /// In real time, not under a paused clock: a paused clock jumps to the role's
    /// timeout while the runtime waits for the role process (see notify's test).
    #[tokio::test]
    async fn an_open_entry_is_run_once_and_its_output_applied_and_the_cursor_follows() {
        let mut s = setup();
        let out = r#"{"note":"seen","entries":[{"to":"Human","kind":"answer","payload":{"summary":"hi"}}]}"#;
        let config = bot_config(s.root(), "", out);
        let e = consume_an_entry_to_bot(&mut s, &config, Duration::from_secs(5));
        let path = "entries/vpm-mini/vpm-mini-docupdate-issue571-1.json";
        // The same entry journaled twice (a replay) is still run once.
        s.append(&[path, path]);
        let store = s.store.clone();
        let status = move || clawboard_entries::read(&store, e.id.as_str()).unwrap().1.status;
        until("the entry done", || status() == clawboard_entries::EntryStatus::Done).await;
        let store = s.store.clone();
        let (list, _) = clawboard_entries::list(&store, &Default::default()).unwrap();
        assert_eq!(list.len(), 2);
        let answer = &list[1];
        assert_eq!((answer.from.as_str(), answer.to.as_str(), answer.kind.as_str()), ("Bot", "Human", "answer"));
        assert_eq!(answer.id.as_str(), "vpm-mini-l-issue571-1");
        // The answer's own entry is journaled too: picked by nobody, so nothing runs.
        s.append(&["entries/vpm-mini/vpm-mini-l-issue571-1.json"]);
        until("the cursor past every entry", || s.cursor(CURSOR) == 3).await;
        s.stop().await;
        assert_eq!(std::fs::read_to_string(s.root().join("runs")).unwrap(), "run\n");
        let h = handling::load(&s.store, "vpm-mini-docupdate-issue571-1").unwrap().unwrap();
        assert_eq!(h.state, State::Applied);
    }

    /// Retention deletes entries that ended, and a counter may give a deleted
    /// entry's id again: the record of the deleted one must not take the new one
    /// for handled; and once an entry is gone, retention prunes its record.
    #[tokio::test]
    async fn an_id_given_again_after_its_entry_went_is_handled_and_the_records_of_entries_gone_are_pruned() {
        let mut s = setup();
        let out = r#"{"entries":[{"to":"Human","kind":"answer","payload":{"summary":"hi"}}]}"#;
        let config = bot_config(s.root(), "", out);
        let e = consume_an_entry_to_bot(&mut s, &config, Duration::from_secs(5));
        let file = "entries/vpm-mini/vpm-mini-docupdate-issue571-1.json";
        let path = clawboard_core::RelPath::new(file).unwrap();
        let (store, id) = (s.store.clone(), e.id.clone());
        let status = move || clawboard_entries::read(&store, id.as_str()).map(|(_, e)| e.status).ok();
        s.append(&[file]);
        until("the entry done", || status() == Some(clawboard_entries::EntryStatus::Done)).await;
        let lanes = s.root().join(clawboard_core::layout::LANES_STATE);
        let (record, attempts) = (lanes.join(format!("{}.json", e.id)), lanes.join(e.id.as_str()));
        assert!(record.exists() && attempts.join("attempts").is_dir());
        assert_eq!(handling::prune(&s.store).unwrap(), 0, "its entry is still there");

        s.store.remove(&path).unwrap();
        let mut again = e.clone();
        again.created_at = clawboard_core::Timestamp::now();
        again.updated_at = again.created_at.clone();
        clawboard_entries::create(&s.store, &again).unwrap();
        s.append(&[file]);
        until("the new entry under the old id done", || status() == Some(clawboard_entries::EntryStatus::Done)).await;
        s.stop().await;
        assert_eq!(std::fs::read_to_string(s.root().join("runs")).unwrap(), "run\nrun\n");
        assert_eq!(handling::load(&s.store, e.id.as_str()).unwrap().unwrap().created_at, Some(again.created_at));

        // A record still under way stays, whether or not its entry is there; so
        // does one that does not read.
        let mut under_way = handling::load(&s.store, e.id.as_str()).unwrap().unwrap();
        (under_way.entry, under_way.state) = ("vpm-mini-gone-1".into(), State::Claimed);
        handling::save(&s.store, &under_way).unwrap();
        std::fs::write(lanes.join("vpm-mini-broken-1.json"), "{").unwrap();
        s.store.remove(&path).unwrap();
        assert_eq!(handling::prune(&s.store).unwrap(), 1);
        assert!(!record.exists() && !attempts.exists(), "the record and its attempts went");
        assert!(lanes.join("vpm-mini-gone-1.json").exists() && lanes.join("vpm-mini-broken-1.json").exists());
    }

    /// An entry journaled again while its handling is under way (here, once it
    /// ended but before the consumer took its end) is looked at once more after
    /// it: a new entry under the id runs, and the cursor stays below the entry's
    /// journal entries until it has.
    #[tokio::test]
    async fn an_entry_journaled_again_while_it_is_handled_is_looked_at_after() {
        let s = setup();
        let out = r#"{"entries":[{"to":"Human","kind":"answer","payload":{"summary":"hi"}}]}"#;
        let mut c = lane_consumer(&s, &bot_config(s.root(), "", out), Duration::from_secs(5));
        let mut e: clawboard_entries::Entry = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"
        ))
        .unwrap();
        e.to = "Bot".into();
        clawboard_entries::create(&s.store, &e).unwrap();
        let file = "entries/vpm-mini/vpm-mini-docupdate-issue571-1.json";
        let change = |seq| Change { seq, change: crate::daemon::jobs::testing::put(file) };
        let (store, id) = (s.store.clone(), e.id.clone());
        let status = move || clawboard_entries::read(&store, id.as_str()).map(|(_, e)| e.status).ok();

        c.handle(vec![change(3)]).await.unwrap();
        until("the entry done", || status() == Some(clawboard_entries::EntryStatus::Done)).await;
        s.store.remove(&clawboard_core::RelPath::new(file).unwrap()).unwrap();
        let mut again = e.clone();
        again.created_at = clawboard_core::Timestamp::now();
        again.updated_at = again.created_at.clone();
        clawboard_entries::create(&s.store, &again).unwrap();
        c.handle(vec![change(7)]).await.unwrap();
        assert_eq!(c.durable(9), 2);

        c.wait_for_work().await;
        assert_eq!(c.durable(9), 2, "the entry is looked at again, under its first bound");
        c.wait_for_work().await;
        assert_eq!(status(), Some(clawboard_entries::EntryStatus::Done));
        assert_eq!(c.durable(9), 9);
        assert_eq!(std::fs::read_to_string(s.root().join("runs")).unwrap(), "run\nrun\n");
        assert!(c.running.is_empty() && c.again.is_empty());
    }

    /// Entries A and B to Bot, and A's record as a crash left it: the role ran, its
    /// answer (returned) planned under the id `vpm-mini-l-issue571-1`, not created.
    fn a_plan_left_by_a_crash(
        s: &crate::daemon::jobs::testing::Setup,
    ) -> (clawboard_entries::Entry, clawboard_entries::Entry, clawboard_entries::Entry) {
        let mut a: clawboard_entries::Entry = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"
        ))
        .unwrap();
        a.to = "Bot".into();
        let mut b = a.clone();
        b.id = clawboard_core::Id::new("vpm-mini-docupdate-issue571-2").unwrap();
        clawboard_entries::create(&s.store, &a).unwrap();
        clawboard_entries::create(&s.store, &b).unwrap();
        let mut answer = a.clone();
        answer.id = clawboard_core::Id::new("vpm-mini-l-issue571-1").unwrap();
        (answer.from, answer.to, answer.kind) = ("Bot".into(), "Human".into(), "answer".into());
        answer.payload = serde_json::from_str(r#"{"summary":"for A"}"#).unwrap();
        answer.created_at = clawboard_core::Timestamp::now();
        answer.updated_at = answer.created_at.clone();
        let output = br#"{"entries":[{"to":"Human","kind":"answer","payload":{"summary":"for A"}}]}"#;
        let record = Handling {
            entry: a.id.to_string(),
            lane: "l".into(),
            actor: "Bot".into(),
            role: "bot".into(),
            state: State::Ran,
            claimed_at: clawboard_core::Timestamp::now(),
            owner: None,
            created_at: Some(a.created_at.clone()),
            output: Some(LaneOutput::parse(output).unwrap()),
            planned: vec![answer.clone()],
            runs: vec!["0001-bot: ok".into()],
        };
        std::fs::create_dir_all(s.root().join(clawboard_core::layout::LANES_STATE)).unwrap();
        handling::save(&s.store, &record).unwrap();
        (a, b, answer)
    }

    /// Starts the consumer on a bot that answers "for B", handles entry `first`,
    /// then `second`, and returns the answers' summaries by id.
    async fn handle_in_turn(
        s: &mut crate::daemon::jobs::testing::Setup,
        first: &clawboard_entries::Entry,
        second: &clawboard_entries::Entry,
    ) -> BTreeMap<String, String> {
        let config =
            bot_config(s.root(), "", r#"{"entries":[{"to":"Human","kind":"answer","payload":{"summary":"for B"}}]}"#);
        start_consumer(s, &config, Duration::from_secs(5));
        for e in [first, second] {
            s.append(&[&format!("entries/vpm-mini/{}.json", e.id)]);
            let store = s.store.clone();
            let done = || clawboard_entries::read(&store, e.id.as_str()).unwrap().1.status.is_final();
            until("the entry handled", done).await;
        }
        s.stop().await;
        let (list, _) = clawboard_entries::list(&s.store, &Default::default()).unwrap();
        list.iter()
            .filter(|e| e.kind == "answer")
            .map(|e| (e.id.to_string(), e.payload["summary"].as_str().unwrap_or_default().to_owned()))
            .collect()
    }

    /// After the restart, B is handled before A's replay: B's answer keeps clear
    /// of the id A's plan holds, and A's replay creates its answer under that id
    /// without running the role again.
    #[tokio::test]
    async fn a_plan_a_crash_left_unapplied_keeps_its_id_from_entries_handled_after_the_restart() {
        let mut s = setup();
        let (a, b, _) = a_plan_left_by_a_crash(&s);
        let answers = handle_in_turn(&mut s, &b, &a).await;
        assert_eq!(
            answers,
            BTreeMap::from([
                ("vpm-mini-l-issue571-1".to_owned(), "for A".to_owned()),
                ("vpm-mini-l-issue571-2".to_owned(), "for B".to_owned()),
            ])
        );
        assert_eq!(std::fs::read_to_string(s.root().join("runs")).unwrap(), "run\n", "only B's role ran");
    }

    /// The id A's plan holds was taken meanwhile by another answer from the same
    /// actor, made in the same second, saying something else: A's replay does not
    /// take it for its own, and creates its answer under a new id.
    #[tokio::test]
    async fn a_replayed_plan_whose_id_another_entry_took_gets_a_new_id() {
        let mut s = setup();
        let (a, b, answer) = a_plan_left_by_a_crash(&s);
        let mut other = answer.clone();
        other.payload = serde_json::from_str(r#"{"summary":"for someone else"}"#).unwrap();
        clawboard_entries::create(&s.store, &other).unwrap();
        let answers = handle_in_turn(&mut s, &a, &b).await;
        assert_eq!(
            answers,
            BTreeMap::from([
                ("vpm-mini-l-issue571-1".to_owned(), "for someone else".to_owned()),
                ("vpm-mini-l-issue571-2".to_owned(), "for A".to_owned()),
                ("vpm-mini-l-issue571-3".to_owned(), "for B".to_owned()),
            ])
        );
    }

    /// A handling that fails (here its record on this node does not read) is the
    /// lane job's failed round in the runner's count, and is tried again; once the
    /// record is repaired the entry is handled.
    #[tokio::test]
    async fn a_failed_handling_is_counted_by_the_runner_and_tried_again() {
        let mut s = setup();
        let config = bot_config(s.root(), "", r#"{"note":"seen"}"#);
        let e = consume_an_entry_to_bot(&mut s, &config, Duration::from_secs(5));
        let record = s.root().join(clawboard_core::layout::LANES_STATE).join(format!("{}.json", e.id.as_str()));
        std::fs::create_dir_all(record.parent().unwrap()).unwrap();
        std::fs::write(&record, b"{ not json").unwrap();
        s.append(&["entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"]);
        until("the failure counted", || s.stats(CURSOR).failures.load(std::sync::atomic::Ordering::Relaxed) == 1).await;
        assert!(s.failing(CURSOR), "the lane job is failing");
        assert!(!s.root().join("runs").exists(), "no role ran");
        std::fs::remove_file(&record).unwrap();
        let store = s.store.clone();
        let status = move || clawboard_entries::read(&store, e.id.as_str()).unwrap().1.status;
        until("the entry done once the record is gone", || status() == clawboard_entries::EntryStatus::Done).await;
        s.stop().await;
        assert_eq!(std::fs::read_to_string(s.root().join("runs")).unwrap(), "run\n");
    }

    /// A stop while the role of an entry runs: within the grace period its
    /// output is applied before the consumer ends; past it, the handling is
    /// given up and the entry stays open for the next start.
    #[tokio::test]
    async fn a_stop_waits_the_grace_period_for_a_handling_under_way() {
        for (grace, applied) in [(Duration::from_secs(10), true), (Duration::from_millis(100), false)] {
            let mut s = setup();
            let out = r#"{"note":"seen"}"#;
            let config = bot_config(s.root(), "sleep 1; ", out);
            let e = consume_an_entry_to_bot(&mut s, &config, grace);
            s.append(&["entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"]);
            let runs = s.root().join("runs");
            until("the role started", || runs.exists()).await;
            s.stop().await;
            let status = clawboard_entries::read(&s.store, e.id.as_str()).unwrap().1.status;
            let done = status == clawboard_entries::EntryStatus::Done;
            assert_eq!(done, applied, "grace {grace:?}: {status:?}");
            // The cursor never passes an entry that was given up.
            assert_eq!(s.cursor(CURSOR) >= 1, applied, "grace {grace:?}");
        }
    }
}
