//! Helpers for the end-to-end tests: run the real `clawboard` binary in a
//! throwaway tree and look at what it did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub mod archive;
pub mod blueprints;
pub mod git;
pub mod phoenix;
pub mod review;
pub mod s3;

/// The `clawboard` binary: `$CLAWBOARD_BIN` when set (scripts/test sets it), else
/// built once with cargo so that it is never stale.
pub fn bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CLAWBOARD_BIN") {
            return PathBuf::from(p);
        }
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "clawboard", "--bin", "clawboard"])
            .current_dir(workspace)
            .status()
            .expect("running cargo build");
        assert!(status.success(), "cargo build of clawboard failed");
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
        target.join("debug/clawboard")
    })
    .clone()
}

/// The repository root (for `config/examples/…` and fixtures).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A temp directory with a blackboard root inside it (not yet initialized).
pub struct Tree {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
}

/// What a run printed, and how it ended.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Panics with the whole output unless the exit code is `code`.
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code {} (want {code})\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    pub fn ok(&self) -> &Run {
        self.expect_code(0)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

impl Default for Tree {
    fn default() -> Self {
        Self::new()
    }
}

impl Tree {
    pub fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("blackboard");
        Tree { dir, root }
    }

    /// An initialized tree.
    pub fn init() -> Tree {
        let t = Tree::new();
        t.run(&["init"]).ok();
        t
    }

    /// A command with a clean environment: no CLAWBOARD_* from the caller, HOME in the temp dir.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.arg("--root").arg(&self.root).args(args);
        self.clean_env(&mut c);
        c
    }

    /// Like [`Tree::command`] but without `--root`.
    pub fn command_no_root(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args);
        self.clean_env(&mut c);
        c
    }

    fn clean_env(&self, c: &mut Command) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("CLAWBOARD_") || k == "XDG_CONFIG_HOME" || k == "GITHUB_TOKEN" {
                c.env_remove(k);
            }
        }
        c.env("HOME", self.dir.path().join("home")).current_dir(repo());
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).stdin(Stdio::null()).output().unwrap())
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        use std::io::Write;
        let mut child =
            self.command(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // The child may refuse early and close stdin; a broken pipe is then expected.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        Run::from(child.wait_with_output().unwrap())
    }

    /// Writes `bytes` to a file in the temp dir (outside the tree) and returns its path.
    pub fn scratch(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join("scratch").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Every file under the root with its content (lock files excluded: they are
    /// created empty on first use and hold no data).
    pub fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        snapshot_into(&self.root, &self.root, &mut out);
        out
    }
}

fn snapshot_into(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        if rel.starts_with(".clawboard/locks") {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            out.insert(format!("{rel}/"), Vec::new());
            snapshot_into(root, &p, out);
        } else {
            out.insert(rel, std::fs::read(&p).unwrap());
        }
    }
}

/// Polls `cond` every 25 ms until it holds; panics with `what` after `secs`.
/// The attempt records of the runs for entry `id` (`.clawboard/lanes/{id}/attempts/`),
/// by number: each record's file name and content.
pub fn entry_attempts(root: &Path, id: &str) -> Vec<(String, serde_json::Value)> {
    let dir = root.join(format!(".clawboard/lanes/{id}/attempts"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let record = serde_json::from_slice(&std::fs::read(dir.join(&n)).unwrap()).unwrap();
            (n, record)
        })
        .collect()
}

pub fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// A `clawboard daemon` child process on a [`Tree`].
pub struct Daemon {
    pub child: std::process::Child,
    pub log: PathBuf,
}

impl Tree {
    /// Writes `config` as the tree's config file and returns its path.
    pub fn config(&self, config: &str) -> PathBuf {
        let p = self.dir.path().join("clawboard.toml");
        std::fs::write(&p, config).unwrap();
        p
    }

    /// Starts the daemon with the config written by [`Tree::config`]; waits until its API answers.
    pub fn daemon(&self) -> Daemon {
        self.daemon_with_env(&[])
    }

    /// [`Tree::daemon`] with these variables in the daemon's environment.
    pub fn daemon_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        let log = self.dir.path().join(format!(
            "daemon-{}.log",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ));
        let cfg = self.dir.path().join("clawboard.toml");
        let mut cmd = self.command(&["--config", cfg.to_str().unwrap(), "daemon"]);
        cmd.envs(env.iter().copied());
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f).spawn().unwrap();
        let mut d = Daemon { child, log };
        let started = std::time::Instant::now();
        let deadline = started + std::time::Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("daemon exited early ({status}):\n{}", d.output());
            }
            if self.daemon_status().is_some() {
                break;
            }
            // The log says where a slow start spent its time.
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon's API did not answer within {:?}; its log:\n{}",
                started.elapsed(),
                d.output()
            );
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        d
    }

    /// The running daemon's status from its API (through `clawboard status --json`).
    pub fn daemon_status(&self) -> Option<serde_json::Value> {
        let r = self.run(&["status", "--json"]);
        if r.code != 0 {
            return None;
        }
        let v = r.json()["daemon"].clone();
        (!v.is_null()).then_some(v)
    }

    /// Drops `body` into `inbox/{name}` by writing a temp file and renaming it.
    pub fn drop_task(&self, name: &str, body: &str) {
        let tmp = self.root.join(format!("inbox/.{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, self.root.join("inbox").join(name)).unwrap();
    }

    /// `task.json` of a task, if it exists and parses.
    pub fn task(&self, id: &str) -> Option<serde_json::Value> {
        let bytes = std::fs::read(self.root.join("tasks").join(id).join("task.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn status_of(&self, id: &str) -> String {
        self.task(id).map(|t| t["status"].as_str().unwrap_or("").to_owned()).unwrap_or_default()
    }

    /// The id of the (first readable) escalation in `escalations/` about `task`.
    pub fn escalation_of(&self, task: &str) -> Option<String> {
        std::fs::read_dir(self.root.join("escalations")).ok()?.filter_map(Result::ok).find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !name.ends_with(".json") {
                return None; // a write in progress
            }
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            (v["taskId"] == task).then(|| name.trim_end_matches(".json").to_owned())
        })
    }

    /// The attempt records of a task.
    pub fn attempts(&self, id: &str) -> Vec<serde_json::Value> {
        let dir = self.root.join("tasks").join(id).join("attempts");
        let mut out: Vec<serde_json::Value> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                    .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by_key(|a| a["number"].as_u64());
        out
    }
}

impl Daemon {
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let ok =
            Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill -{sig} failed");
    }

    /// SIGTERM, then waits; returns the exit code.
    pub fn stop(mut self) -> i32 {
        self.signal("TERM");
        let status = self.child.wait().unwrap();
        status.code().unwrap_or(-1)
    }

    /// SIGKILL: a crash.
    pub fn crash(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A config whose roles are small `sh` programs: a PM that picks worker `w` (or
/// the role named after `use-` in the description), a validator that passes, a
/// harvester. `extra` is appended (more `[roles.*]`).
pub fn sh_config(extra: &str) -> String {
    sh_config_with("", extra)
}

/// The head of the test configs: a 2 s shutdown grace, the lifecycle's validator
/// and harvester roles, room for 16 tasks, and PM `pm` for coding tasks.
pub const LIFECYCLE_HEAD: &str = r#"[daemon]
shutdown_grace = "2s"

[lifecycle]
validator = "validator"
harvester = "harvester"
max_tasks = 16
max_parallel_roles = 8

[lifecycle.pm_for_type]
coding = "pm"
"#;

/// [`sh_config`] with `before` (a shell snippet ending in `; `) run first by every role.
pub fn sh_config_with(before: &str, extra: &str) -> String {
    format!(
        r#"{LIFECYCLE_HEAD}
[roles.pm]
command = ["sh", "-c", "{before}ctx=$(cat); r=w; case \"$ctx\" in *use-slow*) r=slow;; *use-garbage*) r=garbage;; *use-crash*) r=crash;; *use-esc*) r=esc;; *use-long*) r=long;; *use-http*) r=reviewer;; esac; printf '{{\"team\":[{{\"role\":\"%s\",\"priority\":1}}]}}' $r"]
retry_backoff = "10ms"

[roles.w]
command = ["sh", "-c", "{before}cat >/dev/null; printf '{{\"summary\":\"w did it\"}}'"]
retry_backoff = "10ms"

[roles.skill]
command = ["sh", "-c", "{before}cat >/dev/null; printf '{{\"summary\":\"skill did it\"}}'"]
retry_backoff = "10ms"

[roles.validator]
command = ["sh", "-c", "{before}cat >/dev/null; printf '{{\"score\":9,\"pass\":true}}'"]
retry_backoff = "10ms"

[roles.harvester]
command = ["sh", "-c", "{before}cat >/dev/null; printf '{{\"experiences\":[{{\"roleId\":\"w\",\"cells\":[{{\"type\":\"insight\",\"content\":\"c\",\"value\":0.5}}]}}]}}'"]
retry_backoff = "10ms"
{extra}"#
    )
}

/// A real HTTP role server: Python's http.server on 127.0.0.1 (a port the OS
/// picks), answering each POST with `{"summary": SUMMARY}`, SUMMARY a Python
/// expression over `ctx` (the context posted) and `self.headers`. Stopped when
/// dropped.
pub struct HttpRole {
    child: std::process::Child,
    pub port: u16,
}

impl HttpRole {
    pub fn start(summary: &str) -> HttpRole {
        use std::io::{BufRead, BufReader};
        let server = format!(
            r#"
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        ctx = json.loads(self.rfile.read(int(self.headers["content-length"])))
        body = json.dumps({{"summary": {summary}}}).encode()
        self.send_response(200); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#
        );
        let mut child = Command::new("python3").args(["-c", &server]).stdout(Stdio::piped()).spawn().unwrap();
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut port).unwrap();
        HttpRole { child, port: port.trim().parse().unwrap() }
    }
}

impl Drop for HttpRole {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
