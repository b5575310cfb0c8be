//! A node's sync client: the push, pull and cluster jobs over one [`SyncState`],
//! built together so the command line and the daemon open them in one call.

use std::path::Path;
use std::sync::Arc;

use clawboard_core::Store;

use crate::cluster::Cluster;
use crate::error::Result;
use crate::pull::Pull;
use crate::push::Push;
use crate::remote::Remote;
use crate::settings::SyncSettings;
use crate::shared::SyncState;

/// The three sync jobs of one node, sharing one state.
pub struct Client<R: Remote> {
    pub push: Arc<Push<R>>,
    pub pull: Arc<Pull<R>>,
    pub cluster: Arc<Cluster<R>>,
}

impl<R: Remote> Client<R> {
    /// Node `node`'s client for the tree at `root` on `remote`; pulled files are
    /// written through `writer` (see [`SyncState::new`]).
    pub fn open(remote: R, root: &Path, settings: SyncSettings, node: String, writer: Store) -> Result<Client<R>> {
        let sync = Arc::new(SyncState::new(remote, root, settings, node, writer)?);
        Ok(Client {
            push: Arc::new(Push::new(sync.clone())),
            pull: Arc::new(Pull::new(sync.clone())),
            cluster: Arc::new(Cluster::new(sync)),
        })
    }
}
