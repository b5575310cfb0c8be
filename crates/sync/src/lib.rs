//! clawboard-sync shares the tree through an S3-compatible bucket.
//!
//! - [`remote`]: the [`Remote`] trait; [`s3`] (aws-sdk-s3, R2-safe) and [`dir`]
//!   (a local directory, the embedded default) implement it; [`AnyRemote`] picks one
//!   from the config.
//! - [`push`]: the journal-driven push with its durable cursor and [`state`].
//! - [`log`], [`pull`], [`version`]: the change log in the bucket, applying other
//!   nodes' changes, and conflicts decided by version vector and HLC.
//! - [`cluster`]: heartbeats, node status and cross-node task claims.
//! - [`node`], [`report`]: below push, pull and cluster, what they share: this
//!   node's heartbeat format and claim/fence marks on disk; the push and pull
//!   reports and the status file.
//! - [`verify`]: compare the bucket with the tree by hash, and repair.
//! - [`settings`]: `[sync]` as written ([`SyncSection`]) and resolved, with errors
//!   naming the key, into [`SyncSettings`]; the node id. The cron [`Schedule`] is
//!   core's, re-exported here.

pub mod cluster;
pub mod dir;
pub mod error;
pub mod log;
pub mod node;
pub mod pull;
pub mod push;
pub mod remote;
pub mod report;
pub mod s3;
pub mod settings;
pub mod state;
pub mod verify;
pub mod version;

pub use error::{Error, Failure, RemoteError, Result};
pub use push::{PUSH_CURSOR, Pusher};
pub use remote::{Body, Condition, Metadata, ObjectInfo, Remote};
pub use report::{PullReport, PushReport};
pub use settings::{AnyRemote, Backend, S3Section, Schedule, SyncSection, SyncSettings, node_id};
