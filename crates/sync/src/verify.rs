//! `sync verify`: list the bucket and compare it with the tree by hash, like
//! `rclone check`; with `fix`, upload what is missing or different and delete extras.
//!
//! Hashes compared: a plain single-part S3 ETag is the MD5 of the content, so it is
//! checked against the file's MD5 with no extra request; any other object (a
//! multipart ETag, which is not a content hash, or a listing without ETags) is
//! checked by HEAD against the BLAKE3 hash push stored in its metadata.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use md5::Digest;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::push::Push;
use crate::remote::{ObjectInfo, Remote, list_all};

#[derive(Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    pub matched: u64,
    /// In the tree, not in the bucket.
    pub missing: Vec<String>,
    /// In the bucket, not in the tree.
    pub extra: Vec<String>,
    /// In both, with different content.
    pub different: Vec<String>,
    /// With `fix`: what was uploaded and deleted.
    pub fixed: u64,
}

impl VerifyReport {
    pub fn differences(&self) -> usize {
        self.missing.len() + self.extra.len() + self.different.len()
    }
}

fn is_plain_md5(etag: &str) -> bool {
    etag.len() == 32 && etag.bytes().all(|b| b.is_ascii_hexdigit())
}

/// MD5 and BLAKE3 of a file, in one read.
fn hashes(path: &Path) -> std::io::Result<(String, String)> {
    let mut f = std::fs::File::open(path)?;
    let mut md5 = md5::Md5::new();
    let mut b3 = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        md5.update(&buf[..n]);
        b3.update(&buf[..n]);
    }
    let md5: String = md5.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((md5, b3.finalize().to_hex().to_string()))
}

/// Compares the bucket with the tree; with `fix`, repairs the bucket through `push`.
pub async fn verify<R: Remote>(push: &Push<R>, fix: bool) -> Result<VerifyReport> {
    let sync = push.sync();
    let remote = sync.remote();
    sync.counts.list.fetch_add(1, Ordering::Relaxed);
    let listed = list_all(remote, "").await.map_err(|e| Error::from(e).at(&remote.describe()))?;
    let objects: BTreeMap<String, ObjectInfo> =
        listed.into_iter().filter(|o| !sync.is_excluded(&o.key)).map(|o| (o.key.clone(), o)).collect();
    let root = sync.root().to_owned();
    let local: BTreeSet<String> = sync.tree_files()?.into_iter().collect();
    let mut report = VerifyReport::default();
    let both: Vec<(String, ObjectInfo)> =
        local.iter().filter_map(|p| objects.get(p).map(|o| (p.clone(), o.clone()))).collect();
    report.missing = local.iter().filter(|p| !objects.contains_key(*p)).cloned().collect();
    report.extra = objects.keys().filter(|k| !local.contains(*k)).cloned().collect();

    let concurrency = sync.settings().concurrency.max(1);
    let checks: Vec<(String, Result<bool>)> = futures_util::stream::iter(both)
        .map(|(path, obj)| {
            let abs = root.join(&path);
            async move {
                let r = async {
                    let abs2 = abs.clone();
                    let meta = std::fs::metadata(&abs).map_err(|e| Error::io(&abs, e))?;
                    if meta.len() != obj.size {
                        return Ok(false);
                    }
                    let (md5, b3) = tokio::task::spawn_blocking(move || hashes(&abs2))
                        .await
                        .map_err(|e| Error::io(&abs, std::io::Error::other(e)))?
                        .map_err(|e| Error::io(&abs, e))?;
                    if let Some(etag) = obj.etag.as_deref().filter(|e| is_plain_md5(e))
                        && remote.md5_etags()
                    {
                        return Ok(etag.eq_ignore_ascii_case(&md5));
                    }
                    sync.counts.head.fetch_add(1, Ordering::Relaxed);
                    let head = remote.head(&path).await?;
                    Ok(head.as_ref().and_then(ObjectInfo::blake3) == Some(b3.as_str()))
                }
                .await;
                (path, r)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for (path, r) in checks {
        if r.map_err(|e| e.at(&remote.describe()))? {
            report.matched += 1;
        } else {
            report.different.push(path);
        }
    }
    report.different.sort();
    if fix && report.differences() > 0 {
        let mut paths = report.missing.clone();
        paths.extend(report.different.iter().cloned());
        paths.extend(report.extra.iter().cloned());
        let fixed = push.repair(paths).await?;
        report.fixed = fixed.uploaded + fixed.deleted;
    }
    Ok(report)
}
