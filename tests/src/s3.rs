//! The S3-compatible servers the sync tests run against: the shared ones that
//! `scripts/s3-servers start` runs (their addresses come in `CLAWBOARD_TEST_*`),
//! private ones a test starts, stops and restarts itself, and the config that
//! points clawboard at each backend.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A backend the same test code runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The local-directory backend.
    Dir,
    /// moto (PyPI): every S3 feature, any credentials, counts requests in its log.
    Moto,
    /// s3s-fs (crates.io): checks signatures, keeps data on disk.
    S3s,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the sync tests need the real S3 servers. Run them through scripts/test, \
             or start them with `eval \"$(scripts/s3-servers start)\"` first"
        )
    })
}

/// Credentials of the shared s3s-fs server.
pub fn s3s_keys() -> (String, String) {
    (env("CLAWBOARD_TEST_S3S_KEY"), env("CLAWBOARD_TEST_S3S_SECRET"))
}

/// Where a test's bucket is.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub kind: Kind,
    /// The endpoint URL (S3 kinds) or the directory (Dir).
    pub at: String,
    pub name: String,
    pub key: String,
    pub secret: String,
}

fn unique(prefix: &str) -> String {
    let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{}", std::process::id(), n % 1_000_000_000_000)
}

impl Bucket {
    /// A new, empty bucket on the shared server of `kind` (or a directory in `scratch`).
    pub fn new(kind: Kind, scratch: &Path) -> Bucket {
        match kind {
            Kind::Dir => Bucket {
                kind,
                // A configured sync.dir must exist (clawboard makes only .clawboard/bucket).
                at: {
                    let at = scratch.join("bucket");
                    std::fs::create_dir_all(&at).unwrap();
                    at.display().to_string()
                },
                name: String::new(),
                key: String::new(),
                secret: String::new(),
            },
            Kind::Moto => Bucket::create(kind, &env("CLAWBOARD_TEST_MOTO"), "test", "test"),
            Kind::S3s => {
                let (k, s) = s3s_keys();
                Bucket::create(kind, &env("CLAWBOARD_TEST_S3S"), &k, &s)
            }
        }
    }

    /// Creates a new bucket on the server at `endpoint`.
    pub fn create(kind: Kind, endpoint: &str, key: &str, secret: &str) -> Bucket {
        let b = Bucket {
            kind,
            at: endpoint.to_owned(),
            name: unique("cb"),
            key: key.to_owned(),
            secret: secret.to_owned(),
        };
        let client = b.client();
        let name = b.name.clone();
        runtime().block_on(async move {
            let mut last = None;
            // A server just (re)started may need a moment.
            for _ in 0..50 {
                match client.create_bucket().bucket(&name).send().await {
                    Ok(_) => return,
                    Err(e) => last = Some(aws_sdk_s3::error::DisplayErrorContext(e).to_string()),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("creating bucket {name}: {}", last.unwrap_or_default());
        });
        b
    }

    /// An SDK client for checking what is in the bucket (S3 kinds).
    pub fn client(&self) -> aws_sdk_s3::Client {
        let creds = aws_sdk_s3::config::Credentials::new(&self.key, &self.secret, None, None, "test");
        let conf = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(&self.at)
            .force_path_style(true)
            .credentials_provider(creds)
            .request_checksum_calculation(aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    /// The `[sync]` config for this bucket; S3 credentials go in an owner-only file in `dir`.
    pub fn sync_config(&self, dir: &Path, extra: &str) -> String {
        match self.kind {
            Kind::Dir => format!("[sync]\ndir = {:?}\n{extra}\n", self.at),
            Kind::Moto | Kind::S3s => {
                let creds = self.write_credentials(&dir.join(format!("{}.env", self.name)));
                format!(
                    "[sync]\n{extra}\n[sync.s3]\nendpoint = {:?}\nregion = \"us-east-1\"\nbucket = {:?}\npath_style = true\ncredentials_file = {:?}\nconnect_timeout = \"2s\"\nrequest_timeout = \"20s\"\n",
                    self.at,
                    self.name,
                    creds.display().to_string()
                )
            }
        }
    }

    /// Writes this bucket's keys as an owner-only credentials file at `path`.
    fn write_credentials(&self, path: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, format!("AWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}\n", self.key, self.secret))
            .unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.to_owned()
    }

    /// clawboard's own client for this bucket.
    pub fn remote(&self) -> clawboard_sync::AnyRemote {
        use clawboard_sync::s3::{CredentialSource, S3Config, S3Remote};
        match self.kind {
            Kind::Dir => {
                clawboard_sync::AnyRemote::Dir(clawboard_sync::dir::DirRemote::open(Path::new(&self.at)).unwrap())
            }
            Kind::Moto | Kind::S3s => {
                // Read at every request: the file outlives the client (one per bucket and key).
                let dir = std::env::temp_dir().join("clawboard-test-credentials");
                std::fs::create_dir_all(&dir).unwrap();
                let creds = self.write_credentials(&dir.join(format!("{}-{}.env", self.name, self.key)));
                let cfg = S3Config {
                    endpoint: Some(self.at.clone()),
                    region: "us-east-1".into(),
                    bucket: self.name.clone(),
                    prefix: String::new(),
                    path_style: true,
                    credentials: CredentialSource::File(creds),
                    request_timeout: Duration::from_secs(30),
                    connect_timeout: Duration::from_secs(2),
                };
                clawboard_sync::AnyRemote::S3(runtime().block_on(S3Remote::new(&cfg)).unwrap())
            }
        }
    }

    /// Every key in the bucket with its user metadata hash (`clawboard-blake3`), by HEAD.
    /// The tree's objects (the bucket's own bookkeeping, `_log/`, `_claims/`, `_nodes/`, aside)
    /// with the BLAKE3 hash in their metadata.
    pub fn objects(&self) -> std::collections::BTreeMap<String, Option<String>> {
        let mut all = self.all_objects();
        all.retain(|k, _| !["_log/", "_claims/", "_nodes/"].iter().any(|p| k.starts_with(p)));
        all
    }

    /// Every object, bookkeeping included.
    pub fn all_objects(&self) -> std::collections::BTreeMap<String, Option<String>> {
        match self.kind {
            Kind::Dir => {
                let root = PathBuf::from(&self.at);
                let mut out = std::collections::BTreeMap::new();
                for e in walkdir_files(&root) {
                    let rel = e.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                    if rel.starts_with(".clawboard-meta/") {
                        continue;
                    }
                    let side = root.join(".clawboard-meta").join(format!("{rel}.json"));
                    let hash = std::fs::read(side)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                        .and_then(|v| v["metadata"]["clawboard-blake3"].as_str().map(str::to_owned));
                    out.insert(rel, hash);
                }
                out
            }
            Kind::Moto | Kind::S3s => {
                let client = self.client();
                let name = self.name.clone();
                runtime().block_on(async move {
                    let mut out = std::collections::BTreeMap::new();
                    let mut token = None;
                    loop {
                        let page = client
                            .list_objects_v2()
                            .bucket(&name)
                            .set_continuation_token(token.clone())
                            .send()
                            .await
                            .unwrap();
                        for o in page.contents() {
                            let key = o.key().unwrap().to_owned();
                            let head = client.head_object().bucket(&name).key(&key).send().await.unwrap();
                            let hash = head.metadata().and_then(|m| m.get("clawboard-blake3").cloned());
                            out.insert(key, hash);
                        }
                        token = page.next_continuation_token().map(str::to_owned);
                        if token.is_none() {
                            return out;
                        }
                    }
                })
            }
        }
    }
}

fn walkdir_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server of the test's own, to stop and restart (on the same port) at will.
pub struct Server {
    pub kind: Kind,
    pub port: u16,
    pub data: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Server {
    /// Starts a private server; `dir` holds its data and log.
    pub fn start(kind: Kind, dir: &Path) -> Server {
        let mut s = Server {
            kind,
            port: free_port(),
            data: dir.join("s3-data"),
            log: dir.join(format!("{kind:?}.log")),
            child: None,
        };
        std::fs::create_dir_all(&s.data).unwrap();
        s.restart();
        s
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts it again (after [`Server::stop`]), on the same port and data.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut cmd = match self.kind {
            Kind::Moto => {
                let mut c = Command::new(env("CLAWBOARD_TEST_MOTO_BIN"));
                c.args(["-H", "127.0.0.1", "-p", &self.port.to_string()]);
                c
            }
            Kind::S3s => {
                let (k, s) = s3s_keys();
                let mut c = Command::new(env("CLAWBOARD_TEST_S3S_BIN"));
                c.args([
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &self.port.to_string(),
                    "--access-key",
                    &k,
                    "--secret-key",
                    &s,
                ])
                .arg(&self.data);
                c
            }
            Kind::Dir => panic!("a directory is not a server"),
        };
        let child = cmd.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        self.child = Some(child);
        let addr = format!("127.0.0.1:{}", self.port);
        crate::wait_until(30, "the S3 server to listen", || std::net::TcpStream::connect(&addr).is_ok());
    }

    /// Kills it (SIGKILL: an outage, not a goodbye).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new bucket on this server.
    pub fn bucket(&self) -> Bucket {
        let (k, s) = match self.kind {
            Kind::S3s => s3s_keys(),
            _ => ("test".into(), "test".into()),
        };
        Bucket::create(self.kind, &self.endpoint(), &k, &s)
    }

    /// Requests in the server's access log (moto logs one line per request) whose
    /// request line starts with `what`, e.g. `PUT /` or `PUT /bucket/`.
    pub fn requests(&self, what: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().filter(|l| l.contains(&format!("\"{what}"))).count()
    }

    /// PUTs of the tree's objects into `bucket` (not of the bucket itself, e.g. its
    /// creation, nor of the bookkeeping under `_log/`, `_claims/`, `_nodes/`).
    pub fn object_puts(&self, bucket: &str) -> usize {
        let lead = format!("\"PUT /{bucket}/");
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter_map(|l| l.find(&lead).map(|i| &l[i + lead.len()..]))
            .filter(|rest| !rest.starts_with([' ', '?']))
            .filter(|rest| !["_log/", "_claims/", "_nodes/"].iter().any(|p| rest.starts_with(p)))
            .count()
    }
}

impl Server {
    /// Request lines of `what` that appear more than once in the access log, with their statuses.
    pub fn repeated(&self, what: &str) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut seen: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for l in log.lines().filter(|l| l.contains(&format!("\"{what}"))) {
            let req = l.split('"').nth(1).unwrap_or("").to_owned();
            let status = l.split('"').nth(2).unwrap_or("").trim().to_owned();
            seen.entry(req)
                .or_default()
                .push(format!("{} {status}", l.split('[').nth(1).unwrap_or("").split(']').next().unwrap_or("")));
        }
        seen.into_iter().filter(|(_, v)| v.len() > 1).map(|(k, v)| format!("{k}: {v:?}")).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
