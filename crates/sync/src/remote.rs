//! The [`Remote`] trait: the handful of object-store operations sync needs, with
//! the semantics both backends keep (S3 through `aws-sdk-s3`, and a local directory).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;

use bytes::Bytes;

use crate::error::RemoteError;

/// User metadata keys (sent as `x-amz-meta-…`; S3 lowercases them).
pub const META_HASH: &str = "clawboard-blake3";
pub const META_NODE: &str = "clawboard-node";
pub const META_MTIME: &str = "clawboard-mtime-ns";
/// HLC stamp and version vector of the object's version (see [`crate::version`]).
pub const META_HLC: &str = "clawboard-hlc";
pub const META_VV: &str = "clawboard-vv";

/// User metadata of an object.
pub type Metadata = BTreeMap<String, String>;

/// The body of a put.
#[derive(Debug, Clone)]
pub enum Body {
    /// Small objects: the bytes themselves.
    Bytes(Bytes),
    /// Large objects: streamed from a file in equal-sized parts. `blake3` is the hash
    /// the caller computed before; the backend hashes what it actually sends and
    /// fails with [`BodyChanged`] when the two differ (the file changed meanwhile).
    File { path: PathBuf, size: u64, blake3: String },
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::File { size, .. } => *size,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A condition on a put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    None,
    /// Create only if no object has the key (`If-None-Match: *`).
    Absent,
    /// Replace only if the object's ETag is this one (`If-Match`).
    Matches(String),
}

/// What HEAD (or a listing, partly) tells about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// Quotes removed. Absent when a listing does not carry it.
    pub etag: Option<String>,
    pub metadata: Metadata,
}

/// Metadata naming `body`'s hash, for an object read back with
/// [`crate::shared::SyncState::get_checked`] (a claim, a heartbeat).
pub fn hashed(body: &[u8]) -> Metadata {
    Metadata::from([(META_HASH.to_owned(), blake3::hash(body).to_hex().to_string())])
}

impl ObjectInfo {
    /// The BLAKE3 hash clawboard stored in the metadata, if any.
    pub fn blake3(&self) -> Option<&str> {
        self.metadata.get(META_HASH).map(String::as_str)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// In key order; `metadata` is empty (listings do not carry it).
    pub objects: Vec<ObjectInfo>,
    /// Pass as `start_after` for the next page; `None` on the last page.
    pub next: Option<String>,
}

/// The file changed while it was being uploaded; the object may hold other bytes
/// than the hash in its metadata says, so the caller must upload it again.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}: changed while being uploaded")]
pub struct BodyChanged(pub String);

/// The outcome of a put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    Stored {
        etag: Option<String>,
    },
    /// Only for [`Body::File`]: see [`BodyChanged`].
    BodyChanged,
}

/// The operations sync needs from an object store. Keys are `/`-separated paths
/// relative to the backend's prefix.
pub trait Remote: Send + Sync + 'static {
    /// Where this remote points, for messages (`s3://bucket/prefix`, `dir:/path`).
    fn describe(&self) -> String;

    /// True when a plain (single-part) ETag in a listing is the MD5 of the content.
    fn md5_etags(&self) -> bool {
        false
    }

    fn put(
        &self,
        key: &str,
        body: Body,
        metadata: &Metadata,
        condition: &Condition,
    ) -> impl Future<Output = Result<PutOutcome, RemoteError>> + Send;

    /// The object's bytes and info; `None` when there is no such object.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<(Bytes, ObjectInfo)>, RemoteError>> + Send;

    fn head(&self, key: &str) -> impl Future<Output = Result<Option<ObjectInfo>, RemoteError>> + Send;

    /// Keys beginning with `prefix`, after `start_after` (exclusive), at most `max` (≤ 1000).
    fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> impl Future<Output = Result<Page, RemoteError>> + Send;

    /// Deleting a missing object is not an error.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), RemoteError>> + Send;

    /// Deletes up to 1000 keys in one request; returns the keys that failed.
    fn delete_many(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<Vec<(String, RemoteError)>, RemoteError>> + Send;
}

/// Lists every key under `prefix`, page by page.
pub async fn list_all<R: Remote + ?Sized>(remote: &R, prefix: &str) -> Result<Vec<ObjectInfo>, RemoteError> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = remote.list(prefix, after.as_deref(), 1000).await?;
        out.extend(page.objects);
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}
