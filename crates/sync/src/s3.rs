//! The S3 backend, through `aws-sdk-s3`, with settings that work on Cloudflare R2:
//! checksums only when an operation requires them (R2 rejects some of the SDK's
//! default trailing checksums), path-style addressing when asked, and multipart
//! uploads in equal-sized parts (R2 requires every part but the last to be the same
//! size). A multipart ETag is not a hash of the content, so nothing here treats it
//! as one: the content hash travels in the object's metadata.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_credential_types::provider;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, IdentityCache, ProvideCredentials, Region, RequestChecksumCalculation,
    ResponseChecksumValidation, SharedCredentialsProvider,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use bytes::Bytes;
use clawboard_core::secret;

use crate::error::{Error, Failure, RemoteError};
use crate::remote::{Body, Condition, Metadata, ObjectInfo, Page, PutOutcome, Remote};

/// Parts of a multipart upload: all this size but the last (R2 needs equal parts; S3 ≥ 5 MiB).
pub const PART_SIZE: u64 = 8 << 20;

/// Where credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) from the environment.
    Env,
    /// A profile of `~/.aws/credentials` / `~/.aws/config`.
    Profile(String),
    /// A file of `AWS_ACCESS_KEY_ID=…` / `AWS_SECRET_ACCESS_KEY=…` lines (the
    /// systemd `EnvironmentFile` format), readable by its owner only.
    File(PathBuf),
}

impl CredentialSource {
    /// The files that hold the keys, for the sandbox to deny: the credentials
    /// file; for a profile, the AWS shared files (`AWS_SHARED_CREDENTIALS_FILE`,
    /// `AWS_CONFIG_FILE`, else under `home/.aws/`) that exist. `var` reads the
    /// daemon's environment.
    pub fn files(&self, home: Option<&Path>, var: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
        match self {
            CredentialSource::Env => Vec::new(),
            CredentialSource::File(path) => vec![path.clone()],
            CredentialSource::Profile(_) => {
                [("AWS_SHARED_CREDENTIALS_FILE", "credentials"), ("AWS_CONFIG_FILE", "config")]
                    .into_iter()
                    .filter_map(|(name, file)| {
                        var(name).map(PathBuf::from).or_else(|| Some(home?.join(".aws").join(file)))
                    })
                    .filter(|p| p.exists())
                    .collect()
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct S3Config {
    pub endpoint: Option<String>,
    pub region: String,
    pub bucket: String,
    /// Prepended to every key (`clawboard/` → `clawboard/tasks/…`); empty for the bucket root.
    pub prefix: String,
    pub path_style: bool,
    pub credentials: CredentialSource,
    /// Per attempt of a request (a part of a multipart upload is one request).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct S3Remote {
    client: Client,
    bucket: String,
    prefix: String,
    describe: String,
}

/// Reads an env-file of credentials (`NAME=VALUE` lines), refusing one that others can read.
pub fn read_secret_file(path: &Path) -> Result<Credentials, Error> {
    let field = "sync.s3.credentials_file";
    let text = secret::read_file(path, field).map_err(|e| {
        let e = e.into_config_error();
        Error::config(e.key, e.reason)
    })?;
    let mut vars = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(Error::config(field, format!("{}:{}: expected NAME=VALUE", path.display(), n + 1)));
        };
        vars.insert(k.trim().trim_start_matches("export ").to_owned(), v.trim().trim_matches('"').to_owned());
    }
    credentials_from(field, &path.display().to_string(), |k| vars.get(k).cloned())
}

/// The bucket's keys from this process's environment or the credentials file,
/// looked up for every request, so that a key rotated in its file needs no
/// restart (a profile keeps the SDK's own provider and cache). The file is read
/// again whenever its inode, size, mtime or ctime differ from the last read.
#[derive(Debug)]
struct ReadAtUse {
    source: CredentialSource,
    last: clawboard_core::lock::Lock<Option<(FileStamp, Credentials)>>,
}

/// What tells that a file was replaced, rewritten or had its mode changed.
type FileStamp = (u64, u64, u64, i64, i64, i64, i64);

fn stamp(path: &Path) -> std::io::Result<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()))
}

impl ReadAtUse {
    fn new(source: CredentialSource) -> ReadAtUse {
        ReadAtUse { source, last: clawboard_core::lock::Lock::new(None) }
    }

    fn read(&self) -> Result<Credentials, Error> {
        let CredentialSource::File(path) = &self.source else {
            return credentials_from("sync.s3", "the environment", |k| std::env::var(k).ok());
        };
        let now = stamp(path).ok();
        let mut last = self.last.lock();
        if let (Some(now), Some((then, creds))) = (now, last.as_ref())
            && now == *then
        {
            return Ok(creds.clone());
        }
        let creds = read_secret_file(path)?;
        *last = now.map(|n| (n, creds.clone()));
        Ok(creds)
    }
}

impl ProvideCredentials for ReadAtUse {
    fn provide_credentials<'a>(&'a self) -> provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        provider::future::ProvideCredentials::ready(
            self.read().map_err(provider::error::CredentialsError::provider_error),
        )
    }
}

fn credentials_from(field: &str, source: &str, get: impl Fn(&str) -> Option<String>) -> Result<Credentials, Error> {
    let key = get("AWS_ACCESS_KEY_ID").filter(|v| !v.is_empty());
    let secret = get("AWS_SECRET_ACCESS_KEY").filter(|v| !v.is_empty());
    match (key, secret) {
        (Some(k), Some(s)) => Ok(Credentials::new(k, s, get("AWS_SESSION_TOKEN"), None, "clawboard")),
        _ => Err(Error::config(
            field,
            format!(
                "no credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set in {source}{}",
                if source == "the environment" { " (or set sync.s3.credentials_file or sync.s3.profile)" } else { "" }
            ),
        )),
    }
}

impl S3Remote {
    pub async fn new(cfg: &S3Config) -> Result<S3Remote, Error> {
        if cfg.bucket.is_empty() {
            return Err(Error::config("sync.s3.bucket", "empty"));
        }
        let (provider, cache) = match &cfg.credentials {
            CredentialSource::Profile(name) => (
                SharedCredentialsProvider::new(
                    aws_config::profile::ProfileFileCredentialsProvider::builder().profile_name(name).build(),
                ),
                IdentityCache::lazy().build(),
            ),
            source => {
                let at_use = ReadAtUse::new(source.clone());
                // Missing or unreadable keys fail here, at the start, naming the key.
                at_use.read()?;
                (SharedCredentialsProvider::new(at_use), IdentityCache::no_cache())
            }
        };
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(cfg.connect_timeout)
            .operation_attempt_timeout(cfg.request_timeout)
            .build();
        let mut b = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(cfg.region.clone()))
            .credentials_provider(provider)
            .identity_cache(cache)
            .force_path_style(cfg.path_style)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            // Push retries itself, with backoff, across both backends.
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts);
        if let Some(ep) = &cfg.endpoint {
            b = b.endpoint_url(ep);
        }
        let prefix = normalize_prefix(&cfg.prefix);
        let describe = match &cfg.endpoint {
            Some(ep) => format!("s3://{}/{prefix} at {ep}", cfg.bucket),
            None => format!("s3://{}/{prefix}", cfg.bucket),
        };
        Ok(S3Remote { client: Client::from_conf(b.build()), bucket: cfg.bucket.clone(), prefix, describe })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn strip<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(&self.prefix).unwrap_or(key)
    }

    async fn put_multipart(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        expected: &str,
        metadata: &Metadata,
    ) -> Result<PutOutcome, RemoteError> {
        let full = self.full(key);
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(&full)
            .set_metadata(Some(metadata.clone().into_iter().collect()))
            .send()
            .await
            .map_err(|e| classify("PUT", key, e))?;
        let Some(upload_id) = created.upload_id().map(str::to_owned) else {
            return Err(RemoteError::new(
                Failure::Permanent,
                "PUT",
                key,
                "CreateMultipartUpload returned no upload id",
            ));
        };
        let result = self.upload_parts(key, &full, &upload_id, path, size, expected).await;
        match result {
            Ok(Some(parts)) => {
                let done = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
                let out = self
                    .client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(&upload_id)
                    .multipart_upload(done)
                    .send()
                    .await
                    .map_err(|e| classify("PUT", key, e))?;
                Ok(PutOutcome::Stored { etag: out.e_tag().map(unquote) })
            }
            other => {
                // Never complete an upload whose bytes differ from the hash in its metadata.
                let abort = self.client.abort_multipart_upload().bucket(&self.bucket).key(&full).upload_id(&upload_id);
                if let Err(e) = abort.send().await {
                    tracing::warn!(key, "aborting a multipart upload: {}", DisplayErrorContext(&e));
                }
                other.map(|_| PutOutcome::BodyChanged)
            }
        }
    }

    /// Uploads the parts; `None` when the file's bytes no longer hash to `expected`.
    async fn upload_parts(
        &self,
        key: &str,
        full: &str,
        upload_id: &str,
        path: &Path,
        size: u64,
        expected: &str,
    ) -> Result<Option<Vec<CompletedPart>>, RemoteError> {
        let io =
            |e: std::io::Error| RemoteError::new(Failure::Permanent, "PUT", key, format!("{}: {e}", path.display()));
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut hasher = blake3::Hasher::new();
        let mut parts = Vec::new();
        let mut sent = 0u64;
        let mut number = 1;
        loop {
            let mut buf = Vec::with_capacity(PART_SIZE as usize);
            (&mut file).take(PART_SIZE).read_to_end(&mut buf).map_err(io)?;
            if buf.is_empty() && number > 1 {
                break;
            }
            hasher.update(&buf);
            sent += buf.len() as u64;
            let last = (buf.len() as u64) < PART_SIZE;
            let out = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(full)
                .upload_id(upload_id)
                .part_number(number)
                .body(ByteStream::from(Bytes::from(buf)))
                .send()
                .await
                .map_err(|e| classify("PUT", key, e))?;
            parts.push(CompletedPart::builder().part_number(number).set_e_tag(out.e_tag().map(str::to_owned)).build());
            number += 1;
            if last {
                break;
            }
        }
        if hasher.finalize().to_hex().as_str() != expected || sent != size {
            return Ok(None);
        }
        Ok(Some(parts))
    }
}

fn normalize_prefix(p: &str) -> String {
    let p = p.trim_matches('/');
    if p.is_empty() { String::new() } else { format!("{p}/") }
}

fn unquote(etag: &str) -> String {
    etag.trim_matches('"').to_owned()
}

/// Sorts an SDK error into retryable, permanent or precondition-failed, with a
/// message that names the operation, the key and what the server said.
fn classify<E, R>(op: &'static str, key: &str, e: SdkError<E, R>) -> RemoteError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + HasStatus,
{
    let (failure, message) = match &e {
        SdkError::TimeoutError(_) => (Failure::Retryable, "timed out".to_owned()),
        SdkError::DispatchFailure(d) => {
            let retry = d.as_connector_error().is_some_and(|c| c.is_io() || c.is_timeout());
            (if retry { Failure::Retryable } else { Failure::Permanent }, format!("{}", DisplayErrorContext(&e)))
        }
        SdkError::ResponseError(_) => (Failure::Retryable, format!("{}", DisplayErrorContext(&e))),
        SdkError::ServiceError(se) => {
            let status = se.raw().status_code();
            let failure = match status {
                412 => Failure::PreconditionFailed,
                408 | 429 | 500..=599 => Failure::Retryable,
                _ => Failure::Permanent,
            };
            let err = se.err();
            let what = match (err.code(), err.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_owned(),
                _ => "no error code".to_owned(),
            };
            (failure, format!("HTTP {status} {what}"))
        }
        _ => (Failure::Permanent, format!("{}", DisplayErrorContext(&e))),
    };
    RemoteError::new(failure, op, key, message)
}

/// The status code of a raw HTTP response (kept generic so [`classify`] works for every operation).
pub trait HasStatus {
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_smithy_runtime_api::http::Response {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

fn is_not_found<E: ProvideErrorMetadata, R: HasStatus>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::ServiceError(se) => {
            se.raw().status_code() == 404 || matches!(se.err().code(), Some("NoSuchKey" | "NotFound"))
        }
        _ => false,
    }
}

fn metadata_of(m: Option<&HashMap<String, String>>) -> Metadata {
    m.map(|m| m.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect()).unwrap_or_default()
}

impl Remote for S3Remote {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn md5_etags(&self) -> bool {
        true
    }

    async fn put(
        &self,
        key: &str,
        body: Body,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<PutOutcome, RemoteError> {
        let (bytes, file) = match body {
            Body::Bytes(b) => (b, None),
            Body::File { path, size, blake3 } => (Bytes::new(), Some((path, size, blake3))),
        };
        if let Some((path, size, blake3)) = file {
            if *condition != Condition::None {
                return Err(RemoteError::new(
                    Failure::Permanent,
                    "PUT",
                    key,
                    "conditional multipart uploads are not supported",
                ));
            }
            return self.put_multipart(key, &path, size, &blake3, metadata).await;
        }
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(self.full(key))
            .content_length(bytes.len() as i64)
            .set_metadata(Some(metadata.clone().into_iter().collect()))
            .body(ByteStream::from(bytes));
        req = match condition {
            Condition::None => req,
            Condition::Absent => req.if_none_match("*"),
            Condition::Matches(etag) => req.if_match(format!("\"{etag}\"")),
        };
        let out = req.send().await.map_err(|e| classify("PUT", key, e))?;
        Ok(PutOutcome::Stored { etag: out.e_tag().map(unquote) })
    }

    async fn get(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        let out = match self.client.get_object().bucket(&self.bucket).key(self.full(key)).send().await {
            Ok(o) => o,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(classify("GET", key, e)),
        };
        let info = ObjectInfo {
            key: key.to_owned(),
            size: out.content_length().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
            etag: out.e_tag().map(unquote),
            metadata: metadata_of(out.metadata()),
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| RemoteError::new(Failure::Retryable, "GET", key, e.to_string()))?
            .into_bytes();
        let size = bytes.len() as u64;
        Ok(Some((bytes, ObjectInfo { size, ..info })))
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectInfo>, RemoteError> {
        match self.client.head_object().bucket(&self.bucket).key(self.full(key)).send().await {
            Ok(out) => Ok(Some(ObjectInfo {
                key: key.to_owned(),
                size: out.content_length().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                etag: out.e_tag().map(unquote),
                metadata: metadata_of(out.metadata()),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(classify("HEAD", key, e)),
        }
    }

    async fn list(&self, prefix: &str, start_after: Option<&str>, max: usize) -> Result<Page, RemoteError> {
        let max = max.clamp(1, 1000);
        let mut req = self.client.list_objects_v2().bucket(&self.bucket).max_keys(max as i32);
        let full_prefix = self.full(prefix);
        if !full_prefix.is_empty() {
            req = req.prefix(&full_prefix);
        }
        if let Some(after) = start_after {
            req = req.start_after(self.full(after));
        }
        let out = req.send().await.map_err(|e| classify("LIST", prefix, e))?;
        let objects: Vec<ObjectInfo> = out
            .contents()
            .iter()
            .filter_map(|o| {
                Some(ObjectInfo {
                    key: self.strip(o.key()?).to_owned(),
                    size: o.size().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                    etag: o.e_tag().map(unquote).filter(|e| !e.is_empty()),
                    metadata: Metadata::new(),
                })
            })
            .collect();
        let next = if out.is_truncated() == Some(true) { objects.last().map(|o| o.key.clone()) } else { None };
        Ok(Page { objects, next })
    }

    async fn delete(&self, key: &str) -> Result<(), RemoteError> {
        match self.client.delete_object().bucket(&self.bucket).key(self.full(key)).send().await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(classify("DELETE", key, e)),
        }
    }

    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, RemoteError)>, RemoteError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = Vec::with_capacity(keys.len());
        for k in keys {
            let id = ObjectIdentifier::builder()
                .key(self.full(k))
                .build()
                .map_err(|e| RemoteError::new(Failure::Permanent, "DELETE", k, e.to_string()))?;
            ids.push(id);
        }
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .map_err(|e| RemoteError::new(Failure::Permanent, "DELETE", "", e.to_string()))?;
        let what = format!("{} keys", keys.len());
        let out = self
            .client
            .delete_objects()
            .bucket(&self.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| classify("DELETE", &what, e))?;
        Ok(out
            .errors()
            .iter()
            .filter(|e| e.code() != Some("NoSuchKey"))
            .map(|e| {
                let key = self.strip(e.key().unwrap_or("")).to_owned();
                let msg = format!("{}: {}", e.code().unwrap_or("error"), e.message().unwrap_or(""));
                let failure = if matches!(e.code(), Some("InternalError" | "SlowDown")) {
                    Failure::Retryable
                } else {
                    Failure::Permanent
                };
                (key.clone(), RemoteError::new(failure, "DELETE", key, msg))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_credentials_file_is_read_again_for_every_request() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r2.env");
        let write = |key: &str| std::fs::write(&path, format!("AWS_ACCESS_KEY_ID={key}\nAWS_SECRET_ACCESS_KEY=s\n"));
        write("k1").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let at_use = ReadAtUse::new(CredentialSource::File(path.clone()));
        assert_eq!(at_use.read().unwrap().access_key_id(), "k1");
        // Rotated as tools do it: a new file renamed over the old one.
        let next = dir.path().join("r2.env.new");
        std::fs::write(&next, "AWS_ACCESS_KEY_ID=k2\nAWS_SECRET_ACCESS_KEY=s\n").unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(at_use.read().unwrap().access_key_id(), "k2", "the rotated key, without a new client");
        // Rewritten in place, a moment later (file times have the kernel's tick).
        std::thread::sleep(std::time::Duration::from_millis(20));
        write("k3").unwrap();
        assert_eq!(at_use.read().unwrap().access_key_id(), "k3");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = at_use.read().unwrap_err().to_string();
        assert!(e.contains("sync.s3.credentials_file") && e.contains("mode 640") && e.contains("chmod 600"), "{e}");
        assert!(!e.contains("k2"), "{e}");
    }

    #[test]
    fn the_files_holding_the_keys_are_the_credentials_file_or_the_profiles_existing_shared_files() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), "[r2]\n").unwrap();
        let none = |_: &str| None;
        assert!(CredentialSource::Env.files(Some(&home), none).is_empty());
        let file = d.path().join("r2.env");
        assert_eq!(CredentialSource::File(file.clone()).files(Some(&home), none), [file]);
        let profile = CredentialSource::Profile("r2".into());
        // ~/.aws/config does not exist: only the credentials file is named.
        assert_eq!(profile.files(Some(&home), none), [home.join(".aws/credentials")]);
        assert!(profile.files(None, none).is_empty());
        let elsewhere = d.path().join("shared-config");
        std::fs::write(&elsewhere, "[profile r2]\n").unwrap();
        let shown = elsewhere.display().to_string();
        let var = |v: &str| (v == "AWS_CONFIG_FILE").then(|| shown.clone());
        assert_eq!(profile.files(Some(&home), var), [home.join(".aws/credentials"), elsewhere]);
    }
}
