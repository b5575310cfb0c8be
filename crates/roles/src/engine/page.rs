//! A task's `status.md`, written off the step's path. Each change renders the page
//! and hands it to a writer on a blocking thread, which writes the newest page it
//! holds: pages that came faster than it could write are skipped, never written
//! out of order. The run's last page is written before the run returns
//! ([`PageWriter::flush`]). The page is a view (rebuilt at every change), so it is
//! written without fsync ([`clawboard_core::Store::write_view`]).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use clawboard_core::{RelPath, Store};

pub(crate) struct PageWriter {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    rel: RelPath,
    task: String,
    state: Mutex<State>,
    idle: Condvar,
}

#[derive(Default)]
struct State {
    /// The newest page not yet written.
    pending: Option<String>,
    /// A writer is at work (it takes `pending` until there is none).
    busy: bool,
}

impl PageWriter {
    pub(crate) fn new(store: Store, rel: RelPath, task: String) -> PageWriter {
        PageWriter {
            inner: Arc::new(Inner { store, rel, task, state: Mutex::new(State::default()), idle: Condvar::new() }),
        }
    }

    /// Hands `text` to the writer and returns at once.
    pub(crate) fn submit(&self, text: String) {
        let mut st = self.inner.state();
        st.pending = Some(text);
        if st.busy {
            return;
        }
        st.busy = true;
        drop(st);
        let inner = Arc::clone(&self.inner);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || inner.drain());
            }
            Err(_) => inner.drain(),
        }
    }

    /// Writes `text` after the write in progress, if any: when this returns, the
    /// page on disk is `text`.
    pub(crate) fn flush(&self, text: String) {
        let mut st = self.inner.state();
        st.pending = Some(text);
        while st.busy {
            st = self.inner.idle.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.busy = true;
        drop(st);
        self.inner.drain();
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes pages until none is pending, then marks the writer idle.
    fn drain(&self) {
        loop {
            let text = {
                let mut st = self.state();
                match st.pending.take() {
                    Some(t) => t,
                    None => {
                        st.busy = false;
                        self.idle.notify_all();
                        return;
                    }
                }
            };
            if let Err(e) = self.store.write_view(&self.rel, text.as_bytes()) {
                tracing::warn!(task = %self.task, "cannot write status.md: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_last_page_handed_over_is_the_one_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        let rel = RelPath::new("tasks/t1/status.md").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
        rt.block_on(async {
            let w = PageWriter::new(store.clone(), rel.clone(), "t1".into());
            for i in 0..200 {
                w.submit(format!("page {i}\n"));
            }
            w.flush("page final\n".into());
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page final\n");
            // Nothing written later overwrites it.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page final\n");
            w.submit("page after\n".into());
            w.flush("page after 2\n".into());
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page after 2\n");
        });
    }
}
