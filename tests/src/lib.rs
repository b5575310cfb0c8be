//! Helpers for the end-to-end tests: run the real `clawboard` binary in a
//! throwaway tree and look at what it did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

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
    fn from(o: Output) -> Run {
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
            if k.to_string_lossy().starts_with("CLAWBOARD_") || k == "XDG_CONFIG_HOME" {
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
