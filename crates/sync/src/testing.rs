//! What the crate's tests share: a node on a fresh tree, and the directory
//! backend with failures injected.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::Client;
use crate::dir::DirRemote;
use crate::error::{Failure, RemoteError};
use crate::remote::{Body, Condition, Metadata, ObjectInfo, Page, PutOutcome, Remote};

/// Node `id` on a new tree at `root`, with `settings` (see [`settings`]).
pub(crate) fn node_with<R: Remote>(remote: R, root: &Path, id: &str, settings: crate::SyncSettings) -> Client<R> {
    clawboard_core::Store::init(root).unwrap();
    Client::open(remote, root, settings, id.into(), clawboard_core::Store::unchecked(root)).unwrap()
}

/// The local default settings, without retries (a failure shows at once).
pub(crate) fn settings() -> crate::SyncSettings {
    let mut s = crate::SyncSettings::local_default().unwrap();
    s.retries = 0;
    s
}

/// Node `id` on a new tree at `root`, with [`settings`].
pub(crate) fn node<R: Remote>(remote: R, root: &Path, id: &str) -> Client<R> {
    node_with(remote, root, id, settings())
}

/// The directory backend with three failures to switch on: GETs of `key` fail
/// while `fail` is set; every PUT stores its object and then fails while
/// `lose_puts` is set, as a request whose reply never comes back; the next GET
/// of `key` answers the bytes put in `torn` with the object's own metadata, as a
/// server that reads an object beside its write may.
#[derive(Clone)]
pub(crate) struct Flaky {
    pub(crate) inner: DirRemote,
    pub(crate) key: String,
    pub(crate) fail: Arc<AtomicBool>,
    pub(crate) lose_puts: Arc<AtomicBool>,
    pub(crate) torn: Arc<std::sync::Mutex<Option<Bytes>>>,
}

impl Flaky {
    pub(crate) fn new(bucket: &Path) -> Flaky {
        Flaky {
            inner: DirRemote::open(bucket).unwrap(),
            key: String::new(),
            fail: Arc::new(AtomicBool::new(false)),
            lose_puts: Arc::new(AtomicBool::new(false)),
            torn: Arc::default(),
        }
    }
}

impl Remote for Flaky {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn put(&self, k: &str, b: Body, m: &Metadata, c: &Condition) -> Result<PutOutcome, RemoteError> {
        let stored = self.inner.put(k, b, m, c).await?;
        if self.lose_puts.load(Ordering::SeqCst) {
            return Err(RemoteError::new(Failure::Permanent, "PUT", k, "the reply was lost"));
        }
        Ok(stored)
    }
    async fn get(&self, k: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        if k == self.key && self.fail.load(Ordering::SeqCst) {
            return Err(RemoteError::new(Failure::Permanent, "GET", k, "injected failure"));
        }
        let got = self.inner.get(k).await?;
        let torn = if k == self.key { self.torn.lock().unwrap().take() } else { None };
        Ok(match (got, torn) {
            (Some((_, info)), Some(bytes)) => Some((bytes, info)),
            (got, _) => got,
        })
    }
    async fn head(&self, k: &str) -> Result<Option<ObjectInfo>, RemoteError> {
        self.inner.head(k).await
    }
    async fn list(&self, p: &str, a: Option<&str>, m: usize) -> Result<Page, RemoteError> {
        self.inner.list(p, a, m).await
    }
    async fn delete(&self, k: &str) -> Result<(), RemoteError> {
        self.inner.delete(k).await
    }
    async fn delete_many(&self, k: &[String]) -> Result<Vec<(String, RemoteError)>, RemoteError> {
        self.inner.delete_many(k).await
    }
}
