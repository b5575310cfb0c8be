//! The git smart-HTTP server the git tests run against: lighttpd running
//! `git http-backend` as CGI behind HTTP basic auth, on 127.0.0.1. Its config
//! comes from `scripts/git-server config` (the same one `scripts/git-server start`
//! runs); the test runs lighttpd itself, so that it can kill it and start it
//! again on the same port, with the same repositories and credentials.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A private git server, stopped when dropped.
pub struct GitServer {
    /// `http://127.0.0.1:PORT/git`; repositories are at `{url}/NAME.git`.
    pub url: String,
    /// The basic-auth user and password every request needs (fetches too).
    pub user: String,
    pub token: String,
    /// The repositories (`git http-backend`'s GIT_PROJECT_ROOT).
    pub root: PathBuf,
    /// Holds lighttpd's config, user file and logs.
    dir: PathBuf,
    /// The lighttpd binary.
    bin: PathBuf,
    child: Option<Child>,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the archive tests need the real git server. Run them through scripts/test, \
             or start it with `eval \"$(scripts/git-server start)\"` first"
        )
    })
}

impl GitServer {
    /// The shared server `scripts/git-server start` runs (scripts/test starts it);
    /// its address and credentials come in `CLAWBOARD_TEST_GIT_*`. Dropping it leaves it running.
    pub fn shared() -> GitServer {
        let root = PathBuf::from(env("CLAWBOARD_TEST_GIT_ROOT"));
        GitServer {
            url: env("CLAWBOARD_TEST_GIT_URL"),
            user: env("CLAWBOARD_TEST_GIT_USER"),
            token: env("CLAWBOARD_TEST_GIT_TOKEN"),
            dir: root.parent().map(Path::to_owned).unwrap_or_default(),
            root,
            bin: PathBuf::from(env("CLAWBOARD_TEST_GIT_BIN")),
            child: None,
        }
    }

    /// A repository with a name no other test uses.
    pub fn unique_repo(&self, prefix: &str) -> String {
        let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        self.new_repo(&format!("{prefix}-{}-{}", std::process::id(), n % 1_000_000_000_000))
    }

    /// Configures a server in `dir` (a new free port and token, no repositories) and starts it.
    pub fn start(dir: &Path) -> GitServer {
        let out = Command::new(crate::repo().join("scripts/git-server"))
            .arg("config")
            .arg(dir)
            .stdin(Stdio::null())
            .output()
            .expect("running scripts/git-server");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "scripts/git-server config failed ({}); `scripts/git-server install` installs lighttpd:\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // Lines of `export NAME=value`.
        let env: HashMap<&str, &str> =
            stdout.lines().filter_map(|l| l.strip_prefix("export ")?.split_once('=')).collect();
        let var = |name: &str| -> String {
            env.get(name)
                .copied()
                .unwrap_or_else(|| panic!("scripts/git-server config printed no {name}:\n{stdout}"))
                .to_owned()
        };
        let mut s = GitServer {
            url: var("CLAWBOARD_TEST_GIT_URL"),
            user: var("CLAWBOARD_TEST_GIT_USER"),
            token: var("CLAWBOARD_TEST_GIT_TOKEN"),
            root: var("CLAWBOARD_TEST_GIT_ROOT").into(),
            dir: dir.to_owned(),
            bin: var("CLAWBOARD_TEST_GIT_BIN").into(),
            child: None,
        };
        s.restart();
        s
    }

    /// Starts it again (after [`GitServer::stop`]), on the same port and repositories.
    pub fn restart(&mut self) {
        self.stop();
        let log_path = self.dir.join("lighttpd.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).unwrap();
        let child = Command::new(&self.bin)
            .arg("-D")
            .arg("-f")
            .arg(self.dir.join("lighttpd.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        let child = self.child.insert(child);
        let addr = self.url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        crate::wait_until(30, "the git server to listen", || {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("lighttpd exited early ({status}):\n{log}");
            }
            std::net::TcpStream::connect(&addr).is_ok()
        });
    }

    /// Kills it (SIGKILL: an outage, not a goodbye).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Creates the empty bare repository `NAME.git` (branch `main`) and returns its URL,
    /// without credentials.
    pub fn new_repo(&self, name: &str) -> String {
        let name = format!("{}.git", name.trim_end_matches(".git"));
        git(&self.root, &["init", "--quiet", "--bare", "--initial-branch=main", &name]);
        format!("{}/{name}", self.url)
    }

    /// `url` with this server's user and token in it, for the git CLI.
    pub fn authed(&self, url: &str) -> String {
        let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http:// URL: {url}"));
        format!("http://{}:{}@{rest}", self.user, self.token)
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the git CLI in `dir` (with a committer identity, without the caller's git
/// config or prompts) and returns its stdout; panics with its stderr if it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_ASKPASS")
        .env_remove("SSH_ASKPASS")
        .stdin(Stdio::null())
        .output()
        .expect("running git");
    assert!(
        out.status.success(),
        "git {} (in {}) failed ({}):\n{}",
        args.join(" "),
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A private sshd on 127.0.0.1 (OpenSSH, from `scripts/git-server install`) that
/// lets this user in with one key, for git over SSH. Stopped when dropped.
pub struct SshServer {
    pub port: u16,
    /// The private key the server accepts.
    pub client_key: PathBuf,
    /// The server's public host key, as a `known_hosts` line.
    pub known_hosts_line: String,
    /// The user the tests run as (the one sshd lets in).
    pub user: String,
    child: Child,
}

impl SshServer {
    pub fn start(dir: &Path) -> SshServer {
        std::fs::create_dir_all(dir).unwrap();
        let keygen = |name: &str| {
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(name))
                .status()
                .expect("running ssh-keygen")
                .success();
            assert!(ok, "ssh-keygen failed");
        };
        keygen("host_key");
        keygen("client_key");
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let d = dir.display();
        std::fs::write(
            dir.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile {d}/sshd.pid\n"
            ),
        )
        .unwrap();
        // sshd's privilege separation directory (created by its service normally).
        let _ = std::fs::create_dir_all("/run/sshd");
        let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(sshd.exists(), "no /usr/sbin/sshd: `scripts/git-server install` installs openssh-server");
        let mut child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting sshd");
        crate::wait_until(30, "sshd to listen", || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "sshd exited ({status}):\n{}",
                    std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
                );
            }
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let host = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
        let key: Vec<&str> = host.split_whitespace().take(2).collect();
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap().trim().to_owned();
        SshServer {
            port,
            client_key: dir.join("client_key"),
            known_hosts_line: format!("[127.0.0.1]:{port} {}\n", key.join(" ")),
            user,
            child,
        }
    }

    /// The SSH URL of the repository at `path` on this machine.
    pub fn url(&self, path: &Path) -> String {
        format!("ssh://{}@127.0.0.1:{}{}", self.user, self.port, path.display())
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
