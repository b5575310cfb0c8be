//! clawboard-sync shares the tree through an S3-compatible bucket.
//!
//! - [`remote`]: the [`Remote`] trait; [`s3`] (aws-sdk-s3, R2-safe) and [`dir`]
//!   (a local directory, the embedded default) implement it; [`AnyRemote`] picks one
//!   from the config.
//! - [`Client`] ([`client`]): a node's three sync jobs, each holding an `Arc` of
//!   one [`SyncState`] ([`shared`]: the remote, root, settings, node id, push state,
//!   HLC clock, outbox, the store pulled files are written through, the push/pull
//!   exclusion and the request counts):
//!   - [`Push`] ([`push`]): the journal-driven push with its durable cursor and
//!     [`state`]; it also expires this node's old change-log segments;
//!   - [`Pull`] ([`pull`]): applying other nodes' changes from the change log
//!     ([`log`]), conflicts decided by version vector and HLC ([`version`]), the
//!     full reconcile by listing;
//!   - [`Cluster`] ([`cluster`]): heartbeats, node status, cross-node task claims,
//!     takeover and fencing; [`lease`]: how long this node may act on its claims
//!     without hearing from the bucket.
//! - Below push, pull and cluster, what more than one of them needs, so none of
//!   the three imports another: [`shared`]; [`fence`] (reading a claim, fencing a
//!   lost task: push and cluster); [`copy`] (conflict copies' names, and
//!   withdrawing this node's copies from a task it lost: pull and fence); [`node`] (this node's heartbeat format and
//!   claim/fence marks on disk); [`report`] (the push and pull reports and the
//!   status file).
//! - [`verify`]: compare the bucket with the tree by hash, and repair through push.
//! - [`settings`]: `[sync]` as written ([`SyncSection`]) and resolved, with errors
//!   naming the key, into [`SyncSettings`]; the node id. The cron [`Schedule`] is
//!   core's, re-exported here.
//!
//! It never writes the journal; pulled files reach the tree only through the store
//! it is handed.

mod binding;
pub mod client;
pub mod cluster;
pub mod copy;
pub mod dir;
pub mod error;
pub mod fence;
pub mod lease;
pub mod log;
pub mod node;
pub mod pull;
pub mod push;
pub mod remote;
pub mod report;
pub mod s3;
pub mod settings;
pub mod shared;
pub mod state;
#[cfg(test)]
mod testing;
pub mod verify;
pub mod version;

pub use client::Client;
pub use cluster::Cluster;
pub use error::{Error, Failure, RemoteError, Result};
pub use pull::Pull;
pub use push::{PUSH_CURSOR, Push};
pub use remote::{Body, Condition, Metadata, ObjectInfo, Remote};
pub use report::{PullReport, PushReport};
pub use settings::{AnyRemote, Backend, S3Section, Schedule, SyncSection, SyncSettings, node_id};
pub use shared::SyncState;
