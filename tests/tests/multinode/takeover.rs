//! Takeovers: a node killed mid-task is taken over and fenced when it returns.
//!
//! And under fire: three daemons on one bucket with a lease (4 s) that each
//! kill outlives, tasks dropped into all three inboxes, a random daemon killed
//! (`kill -9`) every few seconds and started again 5–15 s later. Then:
//! - no role of a task starts on a node after another node took the task's claim
//!   (the claims in the bucket are watched all along);
//! - every task completed, its end written by its final holder;
//! - the three trees end identical;
//! - every role start is accounted for by an attempt record (in the task, or kept
//!   under the `.clawboard/fenced/` of the node that lost it).
//!
//! `CLAWBOARD_CHAOS_SEED` replays a run (each run prints its seed);
//! `CLAWBOARD_CHAOS_TASKS` (default 60) and `CLAWBOARD_CHAOS_SECS` (how long the
//! kills go on, default 45) make the long version:
//! `CLAWBOARD_CHAOS_TASKS=720 CLAWBOARD_CHAOS_SECS=360 cargo nextest run -p clawboard-tests -E 'test(kills_that_outlive)'`
//! (through `scripts/test`'s servers: `eval "$(scripts/s3-servers start)"` first).
//! `CLAWBOARD_CHAOS_REPORT=FILE` appends the run's figures as one JSON line;
//! `CLAWBOARD_CHAOS_PUSH_EACH_STEP=1` runs the nodes with `sync.push_each_step`;
//! `CLAWBOARD_CHAOS_KEEP=DIR` keeps the nodes' directories of a failed run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clawboard_tests::s3::{Bucket, Kind};
use clawboard_tests::{Daemon, wait_until};

use rstest::rstest;

use super::{Cluster, NODES, on, tree_hashes};

fn now_ms() -> u64 {
    u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// A small deterministic generator (xorshift), so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One role start: (task, role, node index, ms since the epoch, instance id).
#[derive(Debug, Clone)]
struct Start {
    task: String,
    role: String,
    node: usize,
    at: u64,
    instance: String,
}

/// The roles log `task role root ms instance` and take 800 ms (a task about 4 s).
fn roles(runlog: &Path) -> String {
    let log = format!(
        "echo \\\"$CLAWBOARD_TASK_ID $CLAWBOARD_ROLE $CLAWBOARD_ROOT $(date +%s%3N) $CLAWBOARD_INSTANCE_ID\\\" >> {}; sleep 0.8; ",
        runlog.display()
    );
    clawboard_tests::sh_config_with(&log, "")
}

fn starts(c: &Cluster) -> Vec<Start> {
    let roots: Vec<std::path::PathBuf> = c.nodes.iter().map(|n| n.t.root.canonicalize().unwrap()).collect();
    std::fs::read_to_string(&c.runlog)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split(' ').collect();
            let [task, role, root, at, instance] = p.as_slice() else { return None };
            Some(Start {
                task: (*task).to_owned(),
                role: (*role).to_owned(),
                node: roots.iter().position(|r| r == Path::new(root))?,
                at: at.parse().ok()?,
                instance: (*instance).to_owned(),
            })
        })
        .collect()
}

/// Task → generation → (holder, when it was claimed, ms): the claims in the
/// bucket, watched from a thread of its own (all read at once, every 100 ms: a
/// generation lasts seconds at least, so none is missed).
type Claims = Arc<Mutex<BTreeMap<String, BTreeMap<u64, (String, u64)>>>>;

fn ms_of(text: &str) -> u64 {
    u64::try_from(chrono::DateTime::parse_from_rfc3339(text).unwrap().timestamp_millis()).unwrap()
}

fn watch_claims(bucket: &Bucket, stop: Arc<AtomicBool>) -> (Claims, std::thread::JoinHandle<()>) {
    let seen: Claims = Arc::default();
    let remote = Arc::new(bucket.remote());
    let out = seen.clone();
    let handle = std::thread::spawn(move || {
        let rt = clawboard_tests::s3::runtime();
        while !stop.load(Ordering::SeqCst) {
            let docs = rt.block_on(async {
                let listed = clawboard_sync::remote::list_all(remote.as_ref(), "_claims/").await.unwrap_or_default();
                let mut reads = tokio::task::JoinSet::new();
                for o in listed.into_iter().filter(|o| !o.key.starts_with("_claims/_entries/")) {
                    let remote = remote.clone();
                    reads.spawn(async move { clawboard_sync::Remote::get(remote.as_ref(), &o.key).await });
                }
                let mut docs = Vec::new();
                while let Some(read) = reads.join_next().await {
                    if let Ok(Ok(Some((bytes, _)))) = read
                        && let Ok(doc) = serde_json::from_slice::<clawboard_sync::cluster::ClaimDoc>(&bytes)
                    {
                        docs.push(doc);
                    }
                }
                docs
            });
            let mut seen = out.lock().unwrap();
            for d in docs {
                let at = ms_of(&d.claimed_at);
                seen.entry(d.task_id).or_default().entry(d.generation).or_insert((d.node, at));
            }
            drop(seen);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    (seen, handle)
}

/// Role starts on a node after another node claimed the task (a second after the
/// claim's time, which its write may take to land), unless the node claimed it
/// back before the start.
fn starts_after_losing(starts: &[Start], claims: &BTreeMap<String, BTreeMap<u64, (String, u64)>>) -> Vec<String> {
    let mut bad = Vec::new();
    for s in starts {
        let Some(history) = claims.get(&s.task) else { continue };
        let node = NODES[s.node];
        let lost = history.iter().find(|(generation, (holder, at))| {
            holder != node
                && at + 1000 < s.at
                && !history.range(**generation + 1..).any(|(_, (h, back))| h == node && *back <= s.at)
        });
        if let Some((generation, (holder, at))) = lost {
            bad.push(format!(
                "{} {} started on {node} at {} ms, {} ms after {holder} claimed it (generation {generation}; claims seen: {history:?})",
                s.task,
                s.role,
                s.at,
                s.at - at
            ));
        }
    }
    bad
}

/// Every instance id named in an attempt record anywhere a node keeps one.
fn recorded_instances(c: &Cluster) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for n in &c.nodes {
        for dir in ["tasks", ".clawboard/fenced", ".clawboard/fenced-archive"] {
            for e in walkdir::WalkDir::new(n.t.root.join(dir)).into_iter().flatten() {
                let p = e.path();
                if !e.file_type().is_file()
                    || p.extension().is_none_or(|x| x != "json")
                    || !p.parent().is_some_and(|d| d.ends_with("attempts"))
                {
                    continue;
                }
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&std::fs::read(p).unwrap_or_default())
                    && let Some(id) = v["instanceId"].as_str()
                {
                    out.insert(id.to_owned());
                }
            }
        }
    }
    out
}

/// The daemons' log lines about claims, takeovers and fencing, node by node: for
/// whoever reads a failure.
fn claim_log(c: &Cluster) -> String {
    const ABOUT: [&str; 7] =
        ["took over", "not taken over", "fenc", "lost the claim", "lapsed", "holds this task", "claim"];
    let mut out = String::new();
    for n in &c.nodes {
        let mut logs: Vec<std::path::PathBuf> = std::fs::read_dir(n.t.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("daemon-")))
            .collect();
        logs.sort();
        for log in logs {
            for line in std::fs::read_to_string(&log).unwrap_or_default().lines() {
                if ABOUT.iter().any(|a| line.contains(a)) {
                    out.push_str(&format!("{}: {line}\n", n.id));
                }
            }
        }
    }
    out
}

/// Task `t-{n}`, dropped into the inbox of node `n % 3`.
fn drop_one(c: &Cluster, n: u64) {
    let node = usize::try_from(n % 3).unwrap();
    c.nodes[node]
        .t
        .drop_task(&format!("c{n}.json"), &format!(r#"{{"taskId": "t-{n}", "type": "coding", "description": "x"}}"#));
}

/// Starts the three daemons, drops `tasks` tasks over the first 80 % of `secs`,
/// and for `secs` kills a random daemon every 4–8 s (one down at a time) and
/// starts it again later (`scale` times the lease's 4 s: 5–12 s later, the first
/// time 15 s). Returns the daemons (all up), the kills and the restarts.
fn drop_and_kill(c: &Cluster, rng: &mut Rng, tasks: u64, secs: u64, scale: u64) -> (Vec<Option<Daemon>>, u64, u64) {
    let mut daemons: Vec<Option<Daemon>> = c.nodes.iter().map(|n| Some(n.t.daemon())).collect();
    let begin = Instant::now();
    let drop_every = Duration::from_millis(secs * 1000 * 8 / 10 / tasks.max(1));
    let mut dropped = 0;
    let mut next_drop = Instant::now();
    let mut next_kill = Instant::now() + Duration::from_millis(3000 + rng.below(3000));
    let mut back: Vec<(usize, Instant)> = Vec::new();
    let (mut kills, mut restarts) = (0, 0);
    while begin.elapsed() < Duration::from_secs(secs) || !back.is_empty() {
        let now = Instant::now();
        if dropped < tasks && now >= next_drop {
            drop_one(c, dropped);
            dropped += 1;
            next_drop = now + drop_every;
        }
        if begin.elapsed() < Duration::from_secs(secs) && now >= next_kill {
            let up: Vec<usize> = (0..3).filter(|i| daemons[*i].is_some()).collect();
            // At most one node down at a time: the others take its tasks over.
            if up.len() == 3 {
                let victim = up[usize::try_from(rng.below(3)).unwrap()];
                daemons[victim].take().unwrap().crash();
                kills += 1;
                // Down 5–12 s: longer than the 4 s lease, often only just (the node
                // may be back while another takes its tasks over); the first time
                // 15 s, so that at least one takeover surely happens.
                let down = scale * if kills == 1 { 15_000 } else { 5000 + rng.below(7000) };
                back.push((victim, now + Duration::from_millis(down)));
            }
            next_kill = now + Duration::from_millis(4000 + rng.below(4000));
        }
        back.retain(|(i, at)| {
            if now >= *at {
                daemons[*i] = Some(c.nodes[*i].t.daemon());
                restarts += 1;
                false
            } else {
                true
            }
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    while dropped < tasks {
        drop_one(c, dropped);
        dropped += 1;
    }
    (daemons, kills, restarts)
}

/// With `CLAWBOARD_CHAOS_KEEP=DIR`, a failed run leaves each node's directory
/// (tree, `.clawboard/`, daemon logs) under `DIR/{seed}/` for whoever reads it.
struct KeepOnFailure<'a> {
    cluster: &'a Cluster,
    seed: u64,
}

impl Drop for KeepOnFailure<'_> {
    fn drop(&mut self) {
        let Some(dir) = std::env::var_os("CLAWBOARD_CHAOS_KEEP").filter(|_| std::thread::panicking()) else { return };
        let dest = Path::new(&dir).join(self.seed.to_string());
        for n in &self.cluster.nodes {
            let to = dest.join(n.id);
            std::fs::create_dir_all(&to).ok();
            let copied = std::process::Command::new("cp").arg("-a").arg(n.t.dir.path()).arg(&to).status();
            eprintln!("kept {} in {} ({copied:?})", n.id, to.display());
        }
    }
}

fn chaos(kind: Kind) {
    let seed = env_or("CLAWBOARD_CHAOS_SEED", now_ms());
    let tasks = env_or("CLAWBOARD_CHAOS_TASKS", 60);
    let secs = env_or("CLAWBOARD_CHAOS_SECS", 45);
    eprintln!("takeover chaos on {kind:?}: seed {seed}, {tasks} tasks, kills for {secs} s");
    let mut rng = Rng(seed | 1);
    let scratch = tempfile::tempdir().unwrap();
    let bucket = Bucket::new(kind, scratch.path());
    let each_step = env_or("CLAWBOARD_CHAOS_PUSH_EACH_STEP", 0) == 1;
    // moto (one Python process) answers a 1 s heartbeat of three daemons too late
    // on two cores: there, every time is doubled (heartbeat 2 s, lease 8 s).
    let scale = if kind == Kind::Moto { 2 } else { 1 };
    let sync = format!(
        "heartbeat = \"{scale}s\"\nlease = \"{}s\"\n{}",
        4 * scale,
        if each_step { "push_each_step = true" } else { "" }
    );
    let c = Cluster::with_roles(&bucket, roles, &sync);
    let stop = Arc::new(AtomicBool::new(false));
    let (claims, watcher) = watch_claims(&bucket, stop.clone());
    let _keep = KeepOnFailure { cluster: &c, seed };
    let (daemons, kills, restarts) = drop_and_kill(&c, &mut rng, tasks, secs, scale);
    let ids: Vec<String> = (0..tasks).map(|i| format!("t-{i}")).collect();
    wait_until(240, "every task completed on every node", || {
        c.nodes.iter().all(|n| ids.iter().all(|id| n.t.status_of(id) == "completed"))
    });
    let settled = Instant::now();
    if let Err(panic) =
        std::panic::catch_unwind(|| c.converge(120, &format!("seed {seed}: after the last task completed")))
    {
        eprintln!("{}", claim_log(&c));
        std::panic::resume_unwind(panic);
    }
    let converged_ms = settled.elapsed().as_millis();
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    let claims = claims.lock().unwrap().clone();
    let starts = starts(&c);

    let takeovers: usize = claims.values().map(|h| h.len().saturating_sub(1)).sum();
    let bad = starts_after_losing(&starts, &claims);
    assert!(
        bad.is_empty(),
        "seed {seed}: roles started on nodes that had lost the task:\n{}\n{}",
        bad.join("\n"),
        claim_log(&c)
    );
    // Each task's end (its `task.json` in the bucket) was written by the claim's final holder.
    let remote = bucket.remote();
    for id in &ids {
        let holder = claims.get(id).and_then(|h| h.values().last()).map(|(n, _)| n.clone()).unwrap();
        let key = format!("tasks/{id}/task.json");
        let info = clawboard_tests::s3::runtime()
            .block_on(async { clawboard_sync::Remote::head(&remote, &key).await })
            .unwrap()
            .unwrap();
        let author = info.metadata.get(clawboard_sync::remote::META_NODE).cloned().unwrap_or_default();
        assert_eq!(author, holder, "seed {seed}: {id} ended by another node than its final holder");
    }
    let recorded = recorded_instances(&c);
    let unaccounted: Vec<String> = starts
        .iter()
        .filter(|s| !recorded.contains(&s.instance))
        .map(|s| format!("{} {} on {} ({})", s.task, s.role, NODES[s.node], s.instance))
        .collect();
    assert!(unaccounted.is_empty(), "seed {seed}: role starts without an attempt record:\n{}", unaccounted.join("\n"));
    // Steps run more than once (a task's role beyond its first run): by the node
    // that took the task over (at-least-once), or by the same node after its restart
    // (the run the kill cut off).
    let mut per: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for s in &starts {
        per.entry((s.task.as_str(), s.role.as_str())).or_default().push(s.node);
    }
    let (mut by_taker, mut by_same) = (0, 0);
    for nodes in per.values() {
        for w in nodes.windows(2) {
            if w[0] == w[1] { by_same += 1 } else { by_taker += 1 }
        }
    }
    // A task's time: its first role's start to its last harvest's start.
    let mut span: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for s in &starts {
        let e = span.entry(s.task.as_str()).or_insert((s.at, s.at));
        e.0 = e.0.min(s.at);
        if s.role == "harvester" {
            e.1 = e.1.max(s.at);
        }
    }
    let task_ms_mean = span.values().map(|(a, b)| b - a).sum::<u64>() / span.len().max(1) as u64;
    let hashes: Vec<BTreeMap<String, String>> = c.nodes.iter().map(|n| tree_hashes(&n.t.root)).collect();
    let copies = hashes[0].keys().filter(|k| k.contains(".conflict-")).count();
    let figures = serde_json::json!({
        "backend": format!("{kind:?}"), "seed": seed, "tasks": tasks, "kill_secs": secs,
        "push_each_step": each_step, "kills": kills, "restarts": restarts, "task_ms_mean": task_ms_mean, "takeovers": takeovers, "role_starts": starts.len(),
        "steps_rerun_by_taker": by_taker, "steps_rerun_after_restart": by_same, "conflict_copies": copies, "identical_after_ms": converged_ms,
    });
    eprintln!("takeover chaos: {figures}");
    if let Ok(path) = std::env::var("CLAWBOARD_CHAOS_REPORT") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(f, "{figures}").unwrap();
    }
    assert!(
        kills > 0 && takeovers > 0,
        "seed {seed}: the run took nothing over ({figures}); it tested nothing\n{}",
        claim_log(&c)
    );
    for d in daemons.into_iter().flatten() {
        assert_eq!(d.stop(), 0);
    }
}

/// About 75 s. `scripts/test` runs it on its own after the rest (nextest profile
/// `chaos`): the machine's load beside other tests makes leases lapse more often.
#[test]
fn kills_that_outlive_the_lease_never_let_two_nodes_drive_a_task() {
    chaos(Kind::S3s);
}

/// The same on moto (heartbeat 2 s, lease 8 s: with three daemons beating every
/// second, moto answered heartbeats seconds late on two busy cores, every node's
/// lease lapsed again and again, and few kills ended in a takeover).
#[test]
fn kills_that_outlive_the_lease_never_let_two_nodes_drive_a_task_on_moto() {
    chaos(Kind::Moto);
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::s3s(Kind::S3s)]
fn a_node_killed_mid_task_is_taken_over_and_fenced_when_it_returns(#[case] kind: Kind) {
    let (_scratch, bucket, c) = on(kind);
    let mut daemons = c.start();
    let b = &c.node("node-b").t;
    super::kill_b_while_slow_runs(&c, &mut daemons, "t-slow");
    let segments_before: Vec<String> =
        bucket.all_objects().into_keys().filter(|k| k.starts_with("_log/node-b/")).collect();
    wait_until(60, "node-a or node-c to complete t-slow", || {
        ["node-a", "node-c"].iter().any(|id| c.node(id).t.status_of("t-slow") == "completed")
    });
    let runs = c.runs();
    let taker = runs.iter().rev().find(|(t, r, _)| t == "t-slow" && r == "slow").unwrap().2.clone();
    assert_ne!(taker, "node-b");
    assert_eq!(
        runs.iter().filter(|(t, r, _)| t == "t-slow" && r == "pm").count(),
        1,
        "the PM step was not run again: {runs:?}"
    );
    // node-b comes back: it finds the claim taken, and writes nothing into the task.
    let returned = b.daemon();
    c.converge(40, "after node-b returned");
    assert_eq!(b.status_of("t-slow"), "completed");
    let written_after: Vec<String> = bucket
        .all_objects()
        .into_keys()
        .filter(|k| k.starts_with("_log/node-b/") && !segments_before.contains(k))
        .collect();
    let remote = bucket.remote();
    for key in written_after {
        let (bytes, _) = clawboard_tests::s3::runtime()
            .block_on(async { clawboard_sync::Remote::get(&remote, &key).await })
            .unwrap()
            .unwrap();
        let seg: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for e in seg["entries"].as_array().unwrap() {
            assert!(
                !e["p"].as_str().unwrap().starts_with("tasks/t-slow/"),
                "node-b wrote {} after it lost the claim",
                e["p"]
            );
        }
    }
    assert_eq!(
        c.runs().iter().filter(|(t, _, n)| t == "t-slow" && n == "node-b").count(),
        2,
        "node-b ran nothing more"
    );
    // The task holds attempts from two nodes; its replay passes over node-b's cut
    // short step and answers each call from the attempt that counted.
    let t = &c.node(&taker).t;
    let cfg = t.dir.path().join("clawboard.toml");
    let replay = t.run(&["--config", cfg.to_str().unwrap(), "task", "replay", "t-slow", "--json"]);
    assert_eq!(replay.code, 0, "{}{}", replay.stdout, replay.stderr);
    let steps = replay.json()["steps"].clone();
    assert!(steps.as_array().unwrap().iter().all(|s| s["verdict"] == "same"), "{steps:#}");
    drop(returned);
    drop(daemons);
}
