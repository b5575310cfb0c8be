//! The hostile-input corpus (`tests/hostile/corpus.toml`) through the real binary and
//! one running daemon. For every case: the tree is hashed (content, link targets,
//! file types) before and after; only the paths the case lists may differ (the
//! daemon's own state under `.clawboard/` aside); the error the case expects is
//! where it says; and the daemon still answers.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clawboard_tests::{Tree, wait_until};

struct Case {
    name: String,
    via: String,
    kind: String,
    token: String,
    path: String,
    body: Vec<u8>,
    expect: String,
    changes: Vec<String>,
}

/// The cases, and the daemon-owned names (substrings) no case is charged with.
fn corpus() -> (Vec<Case>, Vec<String>) {
    let file = clawboard_tests::repo().join("tests/hostile/corpus.toml");
    let doc: toml::Table = std::fs::read_to_string(&file).unwrap().parse().unwrap();
    let s = |c: &toml::Table, k: &str| c.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let owned = doc["daemon_owned"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    let cases = doc["case"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let c = c.as_table().unwrap();
            let body = match (c.get("body"), s(c, "gen")) {
                (Some(b), _) => b.as_str().unwrap().as_bytes().to_vec(),
                (None, g) if g.is_empty() => Vec::new(),
                (None, g) => generate(&g),
            };
            Case {
                name: s(c, "name"),
                via: s(c, "via"),
                kind: s(c, "kind"),
                token: s(c, "token"),
                path: s(c, "path"),
                body,
                expect: s(c, "expect"),
                changes: c["changes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().replace("{name}", &s(c, "name")))
                    .collect(),
            }
        })
        .collect();
    (cases, owned)
}

fn generate(spec: &str) -> Vec<u8> {
    let (what, n) = spec.split_once(':').unwrap_or((spec, "0"));
    let n: usize = n.parse().unwrap();
    let mut v = br#"{"type":"coding","description":"generated","#.to_vec();
    match what {
        "deep-output" => {
            v = br#"{"summary":"s","output":"#.to_vec();
            v.extend(std::iter::repeat_n(b'[', n));
            v.extend(std::iter::repeat_n(b']', n));
        }
        "deep" => {
            v.extend(b"\"x\":");
            v.extend(std::iter::repeat_n(b'[', n));
            v.extend(std::iter::repeat_n(b']', n));
        }
        "huge" => {
            v.extend(b"\"x\":\"");
            v.extend(std::iter::repeat_n(b'x', n * 1024 * 1024));
            v.push(b'"');
        }
        "nonutf8" => v.extend(b"\"x\":\"\xff\xfe\xc0\""),
        other => panic!("unknown generator {other:?}"),
    }
    v.push(b'}');
    v
}

/// Every entry under `dir`: content hash for files, target for links, the type otherwise.
fn hashes(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(root).min_depth(1).follow_links(false) {
        // An entry that vanished while walking (a temp file renamed into place) is absent.
        let Ok(e) = e else { continue };
        let rel = String::from_utf8_lossy(e.path().strip_prefix(root).unwrap().as_os_str().as_bytes()).into_owned();
        if rel.starts_with(".clawboard") {
            continue;
        }
        let ft = e.file_type();
        let v = if ft.is_symlink() {
            format!("link -> {}", std::fs::read_link(e.path()).unwrap().display())
        } else if ft.is_dir() {
            "dir".to_owned()
        } else if ft.is_file() {
            let Ok(bytes) = std::fs::read(e.path()) else { continue };
            blake3::hash(&bytes).to_hex().to_string()
        } else {
            "special".to_owned()
        };
        out.insert(rel, v);
    }
    out
}

/// [`hashes`] once the tree is quiet: two hashings 150 ms apart agree (the files the
/// daemon owns aside). A write that lands late is then never charged to the next case.
fn settled(root: &Path, daemon_owned: &[String]) -> BTreeMap<String, String> {
    let owned = |mut m: BTreeMap<String, String>| {
        m.retain(|p, _| !daemon_owned.iter().any(|o| p.contains(o.as_str())));
        m
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = owned(hashes(root));
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let now = owned(hashes(root));
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The paths that differ between two hashings.
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter().filter(|k| before.get(*k) != after.get(*k)).cloned().collect()
}

/// The daemon's config: a PM that picks `gate` or `echo` from the description, a
/// `gate` role that publishes its token and waits for `release`, and an `echo` role
/// that prints `outputs/{task}` (no retries: its bad output fails the task at once).
fn config(out: &Path) -> String {
    let o = out.display();
    let head = clawboard_tests::LIFECYCLE_HEAD;
    format!(
        r#"{head}
# Nothing scheduled may write into the tree while a case is hashed.
[retention]
enabled = false

[harvest]
schedule = "0 0 1 1 *"

[archive]
enabled = false

[reports]
enabled = false

[roles.pm]
command = ["sh", "-c", "ctx=$(cat); r=echo; case \"$ctx\" in *use-gate*) r=gate;; esac; printf '{{\"team\":[{{\"role\":\"%s\",\"priority\":1}}]}}' $r"]

[roles.gate]
command = ["sh", "-c", "cat >/dev/null; printf %s \"$CLAWBOARD_TOKEN\" > {o}/token.tmp && mv {o}/token.tmp {o}/token; i=0; while [ ! -e {o}/release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; printf '{{\"summary\":\"gate done\"}}'"]
timeout = "180s"

[roles.echo]
command = ["sh", "-c", "cat >/dev/null; cat {o}/outputs/$CLAWBOARD_TASK_ID"]
max_retries = 0

[roles.validator]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"score\":9,\"pass\":true}}'"]

[roles.harvester]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"experiences\":[]}}'"]
"#
    )
}

struct Run<'a> {
    t: &'a Tree,
    out: PathBuf,
    log: PathBuf,
    failures: Vec<String>,
}

impl Run<'_> {
    fn fail(&mut self, case: &Case, msg: String) {
        self.failures.push(format!("[{}] {msg}", case.name));
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `inbox/rejected/{file}.error.txt` and checks it names the problem.
    fn rejected(&mut self, case: &Case, file: &str) {
        let err = self.t.root.join(format!("inbox/rejected/{file}.error.txt"));
        // The reason is written first, then the file is moved beside it: wait for both.
        let moved = self.t.root.join(format!("inbox/rejected/{file}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(err.exists() && std::fs::symlink_metadata(&moved).is_ok()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(25));
        }
        match std::fs::read_to_string(&err) {
            Ok(text) if text.contains(&case.expect) => {}
            Ok(text) => self.fail(case, format!("want {:?} in {file}.error.txt, got {text:?}", case.expect)),
            Err(_) => self.fail(case, format!("no inbox/rejected/{file}.error.txt after 20 s")),
        }
    }

    fn token(&self, which: &str) -> Option<String> {
        match which {
            "live" | "expired" => Some(std::fs::read_to_string(self.out.join("token")).unwrap()),
            "forged" => Some("0123456789abcdef0123456789abcdef".to_owned()),
            _ => None,
        }
    }

    fn apply(&mut self, case: &Case) {
        let root = self.t.root.clone();
        let file = format!("{}.json", case.name);
        match case.via.as_str() {
            "inbox" => {
                let tmp = root.join(format!("inbox/.{file}.tmp"));
                std::fs::write(&tmp, &case.body).unwrap();
                std::fs::rename(&tmp, root.join("inbox").join(&file)).unwrap();
                self.rejected(case, &file);
            }
            "inbox-raw" => {
                std::fs::write(root.join("inbox").join(&file), &case.body).unwrap();
                self.rejected(case, &file);
            }
            "task-file" => {
                // Whole, by a rename: a scan of the new directory must not catch it half-written.
                let dir = root.join("tasks").join(&case.name);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(".task.json.tmp"), &case.body).unwrap();
                std::fs::rename(dir.join(".task.json.tmp"), dir.join("task.json")).unwrap();
                self.rejected(case, &format!("{}.task.json", case.name));
            }
            "special" => {
                let at = root.join("inbox").join(&file);
                match case.kind.as_str() {
                    "symlink-out" => {
                        let target = self.out.join("outside-task.json");
                        std::fs::write(&target, br#"{"taskId":"stolen","type":"coding","description":"d"}"#).unwrap();
                        std::os::unix::fs::symlink(&target, &at).unwrap();
                    }
                    "fifo" => {
                        assert!(std::process::Command::new("mkfifo").arg(&at).status().unwrap().success());
                    }
                    "non-utf8-name" => {
                        let name = std::ffi::OsStr::from_bytes(b"caf\xe9.json");
                        std::fs::write(root.join("inbox").join(name), br#"{"type":"coding","description":"d"}"#)
                            .unwrap();
                    }
                    "swap-file" => {
                        std::fs::write(root.join("inbox/.swap-file.json.swp"), b"{ half a task").unwrap();
                    }
                    other => panic!("unknown special kind {other:?}"),
                }
                if case.expect.is_empty() {
                    // Nothing to wait for: give the daemon time to (wrongly) act.
                    std::thread::sleep(Duration::from_millis(500));
                } else {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !self.daemon_log().contains(&case.expect) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(25));
                    }
                    if !self.daemon_log().contains(&case.expect) {
                        self.fail(case, format!("want {:?} in the daemon's log", case.expect));
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            "submit" => {
                let f = self.t.scratch(&file, &case.body);
                let r = self.t.run(&["task", "submit", f.to_str().unwrap()]);
                if r.code != 2 || !r.stderr.contains(&case.expect) {
                    self.fail(case, format!("want exit 2 and {:?}, got {} {:?}", case.expect, r.code, r.stderr));
                }
            }
            "api" => {
                let mut args = vec!["write".to_owned()];
                if let Some(t) = self.token(&case.token) {
                    args.extend(["--token".to_owned(), t]);
                }
                args.push(case.path.clone());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let r = self.t.run_with_stdin(&args, &case.body);
                let want_ok = case.expect.is_empty();
                if want_ok && r.code != 0 {
                    self.fail(case, format!("want it written, got {} {:?}", r.code, r.stderr));
                }
                if !want_ok && (r.code != 2 || !r.stderr.contains(&case.expect)) {
                    self.fail(case, format!("want exit 2 and {:?}, got {} {:?}", case.expect, r.code, r.stderr));
                }
            }
            "role-output" => {
                std::fs::write(self.out.join("outputs").join(&case.name), &case.body).unwrap();
                let task = format!(r#"{{"taskId":"{}","type":"coding","description":"echo"}}"#, case.name);
                self.t.drop_task(&file, &task);
                let id = case.name.clone();
                let deadline = Instant::now() + Duration::from_secs(30);
                while !matches!(self.t.status_of(&id).as_str(), "failed" | "completed") && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(25));
                }
                let status = self.t.status_of(&id);
                let errors = std::fs::read_to_string(root.join(format!("tasks/{id}/errors.log"))).unwrap_or_default();
                if status != "failed" || !errors.contains(&case.expect) {
                    self.fail(
                        case,
                        format!("want failed with {:?} in errors.log, got {status:?}: {errors}", case.expect),
                    );
                }
                // The records refresh after a task ends: let it land before the hashing.
                std::thread::sleep(Duration::from_millis(300));
            }
            other => panic!("unknown via {other:?}"),
        }
    }
}

#[test]
fn the_hostile_corpus_gets_clear_errors_and_changes_nothing_else() {
    let t = Tree::init();
    let out = t.dir.path().join("out");
    std::fs::create_dir_all(out.join("outputs")).unwrap();
    t.config(&config(&out));
    let d = t.daemon();
    // A running task whose role instance lends its token to the API cases, and a
    // finished one that role outputs and API writes must leave alone.
    t.drop_task("victim.json", r#"{"taskId":"victim","type":"coding","description":"echo"}"#);
    std::fs::write(out.join("outputs/victim"), r#"{"summary":"victim done"}"#).unwrap();
    wait_until(30, "the victim task", || t.status_of("victim") == "completed");
    t.drop_task("gate.json", r#"{"taskId":"gate","type":"coding","description":"use-gate"}"#);
    wait_until(30, "the gate role's token", || out.join("token").exists());
    std::thread::sleep(Duration::from_millis(500)); // the gate's status.md and active.json settle

    let (cases, daemon_owned) = corpus();
    assert!(cases.len() >= 30, "the corpus has {} cases", cases.len());
    let mut run = Run { t: &t, out: out.clone(), log: d.log.clone(), failures: Vec::new() };
    // Where `../../outside.txt` from the root would land: it must be as it was.
    let climbed = t.root.join("../../outside.txt");
    let climbed_before = std::fs::read(&climbed).ok();
    for case in &cases {
        if case.token == "expired" && !out.join("released").exists() {
            // The instance ends: its token must stop working.
            std::fs::write(out.join("release"), b"").unwrap();
            wait_until(30, "the gate task to end", || t.status_of("gate") == "completed");
            std::fs::write(out.join("released"), b"").unwrap();
            std::thread::sleep(Duration::from_millis(300));
        }
        let before = settled(&t.root, &daemon_owned);
        let started = Instant::now();
        run.apply(case);
        let after = settled(&t.root, &daemon_owned);
        let unexpected: Vec<String> = changed(&before, &after)
            .into_iter()
            .filter(|p| {
                !case
                    .changes
                    .iter()
                    .any(|allowed| p.starts_with(allowed.as_str()) || *p == allowed.trim_end_matches('/'))
            })
            .collect();
        if !unexpected.is_empty() {
            run.fail(case, format!("changed outside {:?}: {unexpected:?}", case.changes));
        }
        if t.daemon_status().is_none() {
            run.fail(case, "the daemon stopped answering".into());
        }
        eprintln!("{:<28} {:<12} {:>6} ms", case.name, case.via, started.elapsed().as_millis());
    }
    // The daemon-owned records ended consistent with what happened: the PM saw the
    // victim and the gate complete and every bad role output fail.
    let outputs = cases.iter().filter(|c| c.via == "role-output").count();
    wait_until(30, "the PM records", || {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(t.root.join("gm/pm-performance.json")).unwrap_or_default())
                .unwrap_or_default();
        v["pms"]["pm"]["completed"] == 2 && v["pms"]["pm"]["failed"] == outputs
    });
    // Nothing was taken from outside the root, and the outside file is intact.
    assert!(!t.root.join("tasks/stolen").exists());
    assert_eq!(std::fs::read(&climbed).ok(), climbed_before, "{} changed", climbed.display());
    assert!(
        run.failures.is_empty(),
        "{} of {} cases failed:\n{}",
        run.failures.len(),
        cases.len(),
        run.failures.join("\n")
    );
    assert_eq!(d.stop(), 0, "the daemon stops cleanly after the corpus");
}

/// Links out of the root, planted where every subsystem looks: nothing follows them.
/// The daemon (watcher, intake, push, records), the sync, archive, retention and
/// report commands run over the tree; the outside files stay byte for byte, the
/// bucket holds none of them, and a link in the state directory stops the daemon
/// from starting.
#[test]
fn nothing_follows_a_symlink_out_of_the_root() {
    use std::os::unix::fs::symlink;
    let t = Tree::init();
    t.config(&clawboard_tests::sh_config(""));
    let outside = t.dir.path().join("outside");
    let old_task = r#"{"taskId":"linked","type":"coding","description":"old","status":"completed","priority":"normal","createdAt":"2020-01-01T00:00:00Z","createdBy":"human","completedAt":"2020-01-02T00:00:00Z"}"#;
    for (rel, body) in [
        ("task-dir/task.json", old_task),
        ("task-dir/result.json", r#"{"summary":"secret result"}"#),
        ("task-dir/secret.txt", "do not upload"),
        ("secret.md", "a secret note"),
        ("reports/2020-01-01.md", "an old report that is not the tree's"),
        ("harvest/2020-01-01.json", "{}"),
    ] {
        std::fs::create_dir_all(outside.join(rel).parent().unwrap()).unwrap();
        std::fs::write(outside.join(rel), body).unwrap();
    }
    let before = hashes(&outside);
    symlink(outside.join("task-dir"), t.root.join("tasks/linked")).unwrap();
    std::fs::create_dir_all(t.root.join("tasks/own")).unwrap();
    symlink(outside.join("secret.md"), t.root.join("tasks/own/notes.md")).unwrap();
    // (A layout directory such as reports/daily/ itself being a link out stops the
    // daemon at start: Store::init refuses it.)
    symlink(outside.join("reports/2020-01-01.md"), t.root.join("reports/daily/2020-01-01.md")).unwrap();
    symlink(outside.join("harvest"), t.root.join("harvest/daily-old")).unwrap();

    let d = t.daemon();
    // Written outside while the daemon watches: never journaled, never pushed.
    std::fs::write(outside.join("task-dir/new.txt"), "written while the daemon ran").unwrap();
    // A link renamed into the tree at run time is not walked either.
    symlink(outside.join("task-dir"), t.dir.path().join("staged-link")).unwrap();
    std::fs::rename(t.dir.path().join("staged-link"), t.root.join("tasks/moved-in")).unwrap();
    t.drop_task("real.json", r#"{"taskId":"real","type":"coding","description":"a real task"}"#);
    wait_until(30, "the real task", || t.status_of("real") == "completed");
    assert_eq!(d.stop(), 0);
    std::fs::write(outside.join("task-dir/new.txt"), "written while the daemon ran").unwrap();
    let before = {
        let mut b = before;
        b.insert("task-dir/new.txt".into(), hashes(&outside)["task-dir/new.txt"].clone());
        b
    };

    let cfg = t.dir.path().join("clawboard.toml");
    let cfg = cfg.to_str().unwrap();
    for args in [
        vec!["sync", "push"],
        vec!["sync", "full"],
        vec!["sync", "verify", "--fix"],
        vec!["sync", "pull"],
        vec!["archive", "now"],
        vec!["retention", "run", "--force"],
        vec!["report", "daily"],
        vec!["task", "list"],
        vec!["status"],
    ] {
        let mut all = vec!["--config", cfg];
        all.extend(args.iter().copied());
        let r = t.run(&all);
        assert_eq!(r.code, 0, "{args:?}: exit {}\n{}\n{}", r.code, r.stdout, r.stderr);
    }
    assert_eq!(hashes(&outside), before, "a file outside the root changed");
    assert!(outside.join("task-dir/task.json").exists(), "retention deleted through a link");
    let bucket = t.root.join(".clawboard/bucket");
    let keys: Vec<String> = hashes(&bucket).into_keys().collect();
    assert!(keys.iter().any(|k| k.starts_with("tasks/real/")), "the real task was pushed: {keys:?}");
    for k in &keys {
        assert!(
            !k.starts_with("tasks/linked")
                && !k.starts_with("tasks/moved-in")
                && k != "tasks/own/notes.md"
                && !k.starts_with("reports/daily/")
                && !k.starts_with("harvest/daily-old"),
            "{k} went to the bucket"
        );
    }

    // A link in the state directory: the daemon refuses to start, naming it.
    symlink("/etc/hostname", t.root.join(".clawboard/sync/planted")).unwrap();
    let r = t.run(&["--config", cfg, "daemon"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains(".clawboard/sync/planted: a symbolic link in clawboard's state directory"),
        "{}",
        r.stderr
    );
}

/// The whole tree deleted under a running daemon: it stops with an error that
/// names what is gone, rather than running on. (Its journal readers took the
/// missing journal for an empty one and asked again at once: a core at 100 %
/// until someone noticed.)
#[test]
fn the_tree_deleted_under_a_running_daemon_stops_it_with_an_error() {
    let t = Tree::init();
    t.config(&clawboard_tests::sh_config(""));
    let mut d = t.daemon();
    t.drop_task("first.json", r#"{"taskId":"first","type":"coding","description":"before the tree goes"}"#);
    wait_until(30, "the first task", || t.status_of("first") == "completed");
    // `rm -rf` races the daemon's own writes into the directories it empties: again until gone.
    wait_until(30, "the tree to be deleted", || std::fs::remove_dir_all(&t.root).is_ok() || !t.root.exists());
    wait_until(30, "the daemon to stop", || d.child.try_wait().unwrap().is_some());
    let code = d.child.wait().unwrap().code();
    assert_ne!(code, Some(0), "{}", d.output());
    let log = d.output();
    assert!(log.contains("journal") && log.contains("No such file or directory"), "{log}");
}
