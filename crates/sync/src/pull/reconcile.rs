//! The full reconcile by listing: a node's first pull, and a pull whose cursor the
//! change log no longer covers (see the module above).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Instant;

use clawboard_core::RelPath;
use futures_util::StreamExt;

use super::{Cursors, Incoming, Pull, PullReport, stamp_of, version_of};
use crate::error::{Error, Result};
use crate::log;
use crate::remote::{ObjectInfo, Remote};
use crate::shared::{Guards, sync_dir};
use crate::state::Pushed;
use crate::version::{self, Order};

impl<R: Remote> Pull<R> {
    /// A full reconcile by listing, when the change log does not cover a cursor.
    ///
    /// An object whose listed ETag is the one this node recorded is skipped; one
    /// listed without an ETag (s3s-fs's listings carry none) is looked at with a
    /// HEAD; only an object whose metadata names a version this node does not hold
    /// is fetched. The listing and the HEADs run without the lock; the fetching and
    /// applying hold it, letting go every [`RECONCILE_SLICE`] so a push waiting for
    /// it goes out while a large bucket is being pulled.
    pub(super) async fn reconcile<'a>(
        &'a self,
        allow_mass_delete: bool,
        mut cursors: Cursors,
        guards: &mut Option<Guards<'a>>,
    ) -> Result<PullReport> {
        let mut report = PullReport { full: true, ..PullReport::default() };
        // What this node shared before the listing: a file pushed while it runs is
        // not taken for gone below.
        let synced: Vec<(String, Pushed)> = self
            .sync
            .with_state(|s| Ok(s.iter().filter(|(_, r)| !r.deleted).map(|(p, r)| (p.clone(), r.clone())).collect()))?;
        // Listing a large bucket, and a HEAD of each object whose listing has no
        // ETag, take minutes on some servers (s3s-fs: 357 s at 100,000 objects). Both
        // only read the bucket, so pushes go on meanwhile; what a push records then
        // is looked at again below.
        *guards = None;
        let survey = self.survey().await;
        self.relock(guards).await?;
        let Survey { tops, present, wanted, unversioned } = survey?;
        // A push that went out after the listing recorded a newer ETag than the one
        // listed, so the survey took the listed object for another node's version;
        // it is the one this node had recorded before the listing (at a daemon's
        // start its first push and first pull run together).
        let before: std::collections::HashMap<&str, &str> =
            synced.iter().filter(|(_, r)| !r.etag.is_empty()).map(|(p, r)| (p.as_str(), r.etag.as_str())).collect();
        let wanted: Vec<ObjectInfo> = wanted
            .into_iter()
            .filter(|o| o.etag.as_deref().is_none_or(|listed| before.get(o.key.as_str()) != Some(&listed)))
            .collect();
        if present.is_empty() && !synced.is_empty() && !allow_mass_delete {
            return Err(Error::Refused {
                reason: format!("the bucket lists no files while this node has {} synced", synced.len()),
            });
        }
        let mut gone = Vec::new();
        for (path, rec) in &synced {
            if !present.contains(path.as_str()) && !self.sync.is_excluded(path) && !self.local(path, Some(rec))?.dirty {
                gone.push((path.clone(), rec.clone()));
            }
        }
        self.guard_deletes(gone.len(), allow_mass_delete)?;
        report.skipped.extend(unversioned.into_iter().map(|k| format!("{k}: the object has no clawboard version")));
        // Fetched `sync.concurrency` at a time, applied as they arrive; every
        // RECONCILE_SLICE the lock is let go for a moment so a waiting push goes out.
        let mut held_since = Instant::now();
        let mut fetched = futures_util::stream::iter(wanted)
            .map(|o| async move {
                tracing::debug!(key = o.key, "reconcile: fetching a version this node may lack");
                let got = self.get(&o.key).await;
                (o, got)
            })
            .buffered(self.sync.settings.concurrency.max(1));
        while let Some((o, got)) = fetched.next().await {
            let Some((bytes, info)) = got? else { continue };
            match version_of(&info, &bytes) {
                Some(record) if RelPath::new(&o.key).is_ok() => {
                    self.apply(Incoming { path: o.key.clone(), record, body: Some(bytes) }, &mut report).await?;
                }
                _ => report.skipped.push(format!("{}: the object has no clawboard version", o.key)),
            }
            if held_since.elapsed() >= RECONCILE_SLICE {
                self.sync.with_state(crate::state::PushState::sync)?;
                *guards = None;
                // Long enough for a process blocked on the lock to take it first.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                self.relock(guards).await?;
                held_since = Instant::now();
            }
        }
        for (path, listed) in gone {
            // Gone unless a push sent another version while the lock was let go, or
            // the file changed here meanwhile.
            let rec = self.sync.with_state(|s| Ok(s.get(&path).cloned()))?;
            if rec.as_ref() != Some(&listed) || self.local(&path, rec.as_ref())?.dirty {
                continue;
            }
            let rel = RelPath::new(&path)?;
            let writer = &self.sync.writer;
            writer.remove(&rel)?;
            let vv = listed.vv;
            self.sync.with_state(|s| s.record(&path, Some(Pushed { vv, deleted: true, ..Pushed::default() })))?;
            report.deleted += 1;
        }
        self.sync.with_state(crate::state::PushState::sync)?;
        cursors.nodes.extend(tops);
        cursors.save(&sync_dir(&self.sync.root))?;
        self.sync.flush_log().await?;
        Ok(report)
    }

    /// What a reconcile needs from the bucket, read without the lock: where each
    /// other node's log stands (segments after it are applied by the next pull, again
    /// and harmlessly if the listing had their objects), every object's key, and
    /// which objects may hold a version this node lacks ([`Self::lacks`]).
    async fn survey(&self) -> Result<Survey> {
        let mut tops = BTreeMap::new();
        for node in self.nodes().await? {
            if node == self.sync.node {
                continue;
            }
            let listed = self.list_after(&log::node_prefix(&node), None).await?;
            if let Some(seq) = listed.iter().filter_map(|o| log::seq_of(&o.key)).max() {
                tops.insert(node, seq);
            }
        }
        let objects: Vec<ObjectInfo> =
            self.list_after("", None).await?.into_iter().filter(|o| !self.sync.is_excluded(&o.key)).collect();
        let present = objects.iter().map(|o| o.key.clone()).collect();
        let (mut wanted, mut unversioned) = (Vec::new(), Vec::new());
        let mut looked = futures_util::stream::iter(objects)
            .map(|o| async move {
                let lacks = self.lacks(&o).await;
                (o, lacks)
            })
            .buffered(self.sync.settings.concurrency.max(1));
        while let Some((o, lacks)) = looked.next().await {
            match lacks? {
                Lacks::No => {}
                Lacks::Unversioned => unversioned.push(o.key),
                Lacks::Maybe => wanted.push(o),
            }
        }
        Ok(Survey { tops, present, wanted, unversioned })
    }

    /// Takes the lock again after a reconcile let it go, and reads what a push did meanwhile.
    async fn relock<'a>(&'a self, guards: &mut Option<Guards<'a>>) -> Result<()> {
        *guards = Some(self.sync.exclusive().await?);
        self.sync.load_state()
    }

    /// Whether the listed object `o` may hold a version this node lacks, without
    /// downloading it: by its listed ETag, else by a HEAD of its metadata.
    async fn lacks(&self, o: &ObjectInfo) -> Result<Lacks> {
        let Some(rec) = self.sync.with_state(|s| Ok(s.get(&o.key).cloned()))? else { return Ok(Lacks::Maybe) };
        match &o.etag {
            Some(listed) if !rec.etag.is_empty() => {
                // Another ETag than the one recorded: a version from elsewhere, fetched at once.
                return Ok(if *listed == rec.etag { Lacks::No } else { Lacks::Maybe });
            }
            _ => {}
        }
        self.sync.counts.head.fetch_add(1, Ordering::Relaxed);
        let Some(info) = self.sync.retry(|| self.sync.remote.head(&o.key)).await? else { return Ok(Lacks::No) };
        Ok(match stamp_of(&info) {
            None => Lacks::Unversioned,
            Some((_, vv, _)) if matches!(version::compare(&vv, &rec.vv), Order::Older | Order::Same) => Lacks::No,
            Some(_) => Lacks::Maybe,
        })
    }
}

/// The bucket as a reconcile found it (see [`Pull::survey`]).
struct Survey {
    tops: BTreeMap<String, u64>,
    present: HashSet<String>,
    /// Objects to fetch, in key order.
    wanted: Vec<ObjectInfo>,
    /// Keys of objects not written by clawboard.
    unversioned: Vec<String>,
}

/// What a reconcile's look at one listed object found.
enum Lacks {
    /// The version this node holds (same ETag, or a HEAD naming an older or equal version).
    No,
    /// Not written by clawboard (no version in its metadata): left alone.
    Unversioned,
    /// Perhaps a version this node lacks: fetched and applied.
    Maybe,
}

/// How long a reconcile holds the push lock before it lets a waiting push through.
const RECONCILE_SLICE: std::time::Duration = std::time::Duration::from_millis(500);
