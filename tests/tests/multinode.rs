//! Many nodes, one bucket, end to end: three real daemons, each with its own root
//! and node id, sharing a bucket (the local-directory backend and a real S3 server,
//! s3s-fs). Every role run is appended to one run log, so "dispatched once" is
//! counted across all nodes; every test ends with the three trees identical.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clawboard_tests::s3::{Bucket, Kind};
use clawboard_tests::{Daemon, Run, Tree};

mod conflicts;
mod dispatch;
mod faults;
mod takeover;
mod trace;

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

struct Node {
    t: Tree,
    id: &'static str,
}

struct Cluster {
    nodes: Vec<Node>,
    runlog: PathBuf,
    _scratch: tempfile::TempDir,
}

/// The usual test roles, each appending `task role root traceparent` to the run
/// log first (the last empty when the run is not traced); `use-slow` in a task's
/// description makes the PM pick `slow`, which takes 8 s.
fn roles(runlog: &Path) -> String {
    let log = format!(
        "echo \\\"$CLAWBOARD_TASK_ID $CLAWBOARD_ROLE $CLAWBOARD_ROOT $TRACEPARENT\\\" >> {}; ",
        runlog.display()
    );
    let slow = format!(
        "[roles.slow]\ncommand = [\"sh\", \"-c\", \"{log}cat >/dev/null; sleep 8; printf '{{\\\"summary\\\":\\\"slow did it\\\"}}'\"]\n"
    );
    clawboard_tests::sh_config_with(&log, &slow)
}

/// Drops task `id`, whose PM picks `slow`, into node-b, and kills node-b
/// (`kill -9`; `daemons` as [`Cluster::start`] made them) 2.5 s into the slow
/// run, once it has pushed the task's progress.
fn kill_b_while_slow_runs(c: &Cluster, daemons: &mut Vec<Daemon>, id: &str) {
    c.node("node-b").t.drop_task(
        &format!("{id}.json"),
        &format!(r#"{{"taskId": "{id}", "type": "coding", "description": "use-slow"}}"#),
    );
    clawboard_tests::wait_until(20, "the slow role running on node-b", || {
        c.runs().iter().any(|(t, r, n)| t == id && r == "slow" && n == "node-b")
    });
    std::thread::sleep(Duration::from_millis(2500));
    daemons.remove(1).crash();
}

/// Three trees on a new bucket of `kind` (the scratch directory lives as long as the result).
fn on(kind: Kind) -> (tempfile::TempDir, Bucket, Cluster) {
    let scratch = tempfile::tempdir().unwrap();
    let bucket = Bucket::new(kind, scratch.path());
    let c = Cluster::new(&bucket);
    (scratch, bucket, c)
}

/// Stops every daemon, each cleanly.
fn stop_all(daemons: Vec<Daemon>) {
    for d in daemons {
        assert_eq!(d.stop(), 0);
    }
}

/// `rounds` times, each of `trees` pulls then pushes, by hand.
fn exchange(trees: &[&Tree], rounds: usize) {
    for _ in 0..rounds {
        for t in trees {
            sync(t, &["pull"]).ok();
            sync(t, &["push"]).ok();
        }
    }
}

impl Cluster {
    /// Three initialized trees configured on `bucket`: sync every second, heartbeat
    /// every second, a 4 s lease.
    fn new(bucket: &Bucket) -> Cluster {
        Cluster::with_roles(bucket, roles, "")
    }

    /// The same, with the roles `roles(runlog)` makes and more `[sync]` keys
    /// (`heartbeat` and `lease` here replace the 1 s and 4 s).
    fn with_roles(bucket: &Bucket, roles: fn(&Path) -> String, sync_extra: &str) -> Cluster {
        let timing = if sync_extra.contains("lease") { "" } else { "heartbeat = \"1s\"\nlease = \"4s\"\n" };
        let scratch = tempfile::tempdir().unwrap();
        let runlog = scratch.path().join("runs.log");
        std::fs::write(&runlog, "").unwrap();
        let nodes = NODES
            .iter()
            .map(|id| {
                let t = Tree::init();
                let sync = bucket.sync_config(
                    t.dir.path(),
                    &format!("schedule = \"* * * * * *\"\n{timing}retry_base = \"50ms\"\nretries = 2\n{sync_extra}"),
                );
                t.config(&format!("[node]\nid = \"{id}\"\n\n{}\n{sync}", roles(&runlog)));
                Node { t, id }
            })
            .collect();
        Cluster { nodes, runlog, _scratch: scratch }
    }

    fn trees(&self) -> Vec<&Tree> {
        self.nodes.iter().map(|n| &n.t).collect()
    }

    fn start(&self) -> Vec<Daemon> {
        self.nodes.iter().map(|n| n.t.daemon()).collect()
    }

    fn node(&self, id: &str) -> &Node {
        self.nodes.iter().find(|n| n.id == id).unwrap()
    }

    /// Role runs as (task, role, node).
    fn runs(&self) -> Vec<(String, String, String)> {
        let text = std::fs::read_to_string(&self.runlog).unwrap();
        text.lines()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let (task, role, root) = (parts.next()?, parts.next()?, parts.next()?);
                let node = self.nodes.iter().find(|n| Path::new(root) == n.t.root.canonicalize().unwrap())?.id;
                Some((task.to_owned(), role.to_owned(), node.to_owned()))
            })
            .collect()
    }

    /// Waits until the three trees hold the same files with the same bytes.
    fn converge(&self, secs: u64, when: &str) {
        let mut last = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            last = self.nodes.iter().map(|n| tree_hashes(&n.t.root)).collect();
            if last.windows(2).all(|w| w[0] == w[1]) {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let a = &last[0];
        for (n, other) in self.nodes.iter().zip(&last).skip(1) {
            let differ: std::collections::BTreeSet<&String> =
                a.keys().chain(other.keys()).filter(|k| a.get(*k) != other.get(*k)).collect();
            if differ.is_empty() {
                continue;
            }
            // Each differing file: its hashes, then both versions, for whoever reads a failure.
            let show = |root: &std::path::Path, k: &str| {
                let text = std::fs::read_to_string(root.join(k)).unwrap_or_else(|e| format!("({e})"));
                text.chars().take(1500).collect::<String>()
            };
            let hashes = differ.iter().map(|k| {
                format!("{k}: {} {:?} vs {:?}", n.id, a.get(*k).map(|h| &h[..8]), other.get(*k).map(|h| &h[..8]))
            });
            let versions = differ.iter().map(|k| {
                format!(
                    "--- {k} on node-a:\n{}\n--- {k} on {}:\n{}",
                    show(&self.nodes[0].t.root, k),
                    n.id,
                    show(&n.t.root, k)
                )
            });
            let hashes: Vec<String> = hashes.collect();
            let versions: Vec<String> = versions.collect();
            panic!(
                "{when}: node-a and {} differ after {secs} s:\n{}\n{}",
                n.id,
                hashes.join("\n"),
                versions.join("\n")
            );
        }
    }
}

/// Every file of a tree with its hash, except `.clawboard/` and the two files each
/// node keeps for itself (`shared/node-status.json`, `roles/active.json`).
fn tree_hashes(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(root).into_iter().filter_entry(|e| e.file_name() != ".clawboard").flatten() {
        if !e.file_type().is_file() {
            continue;
        }
        let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if rel == "shared/node-status.json" || rel == "roles/active.json" {
            continue;
        }
        if let Ok(bytes) = std::fs::read(e.path()) {
            out.insert(rel, blake3::hash(&bytes).to_hex().to_string());
        }
    }
    out
}

fn sync(t: &Tree, args: &[&str]) -> Run {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut all = vec!["--config", cfg.to_str().unwrap(), "sync"];
    all.extend_from_slice(args);
    t.run(&all)
}

/// Two nodes' edits meet: both push, logs are exchanged, every node pulls twice.
fn push_both_and_pull_everywhere(c: &Cluster, a: &Tree, b: &Tree) {
    sync(a, &["push"]).ok();
    sync(b, &["push"]).ok();
    exchange(&c.trees(), 2);
    for _ in 0..2 {
        for n in &c.nodes {
            sync(&n.t, &["pull"]).ok();
        }
    }
}

fn task_ids(t: &Tree) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

/// Three trees on one local-directory bucket, no daemons: every step by hand.
fn by_hand() -> (tempfile::TempDir, Bucket, Cluster) {
    on(Kind::Dir)
}
