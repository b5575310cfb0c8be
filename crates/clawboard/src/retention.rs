//! What holds retention back in this binary: a task goes only once the bucket
//! (with sync on) and the archive (with the archive on) have it. The policy and
//! its plan are `clawboard_core::retention`'s; `clawboard retention` and the
//! daemon's retention job both plan with this guard.

use clawboard_core::retention::Guard;

use crate::config::Settings;

/// Holds a task back until the bucket and the archive have it (each when configured).
pub struct TreeGuard {
    root: std::path::PathBuf,
    sync: Option<clawboard_sync::SyncSettings>,
    archive: Option<clawboard_archive::Archive>,
}

impl TreeGuard {
    pub fn new(s: &Settings, store: &clawboard_core::Store) -> anyhow::Result<TreeGuard> {
        let archive = if s.archive.enabled {
            let node = clawboard_sync::node_id(store.root(), s.node_id.as_deref()).map_err(crate::cli::sync_error)?;
            Some(clawboard_archive::Archive::new(store.clone(), s.archive.settings.clone(), node))
        } else {
            None
        };
        Ok(TreeGuard { root: store.root().to_owned(), sync: s.sync.enabled.then(|| s.sync.clone()), archive })
    }
}

impl Guard for TreeGuard {
    fn task(&self, id: &str) -> Result<(), String> {
        if let Some(sync) = &self.sync {
            match clawboard_sync::push::unpushed_files(&self.root, sync, &format!("tasks/{id}")) {
                Ok(files) if files.is_empty() => {}
                Ok(files) => {
                    return Err(format!(
                        "{} file(s) not confirmed in the bucket yet, e.g. {} (the next push sends them)",
                        files.len(),
                        files[0]
                    ));
                }
                Err(e) => return Err(format!("cannot tell whether the bucket has it: {e}")),
            }
        }
        if let Some(a) = &self.archive {
            match a.task_archived(id) {
                Ok(clawboard_archive::repo::Archived::Yes) => {}
                Ok(clawboard_archive::repo::Archived::NotYet(why)) => return Err(why),
                Err(e) => return Err(format!("cannot tell whether the archive has it: {e}")),
            }
        }
        Ok(())
    }
}
