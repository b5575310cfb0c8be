//! A task's `status.md`, written off the step's path. A change only marks the
//! page changed; a writer on a blocking thread waits [`GATHER`] for more
//! changes, then renders the page as it is and writes it, again while changes
//! keep coming: the changes of a few quick steps share one render and one write
//! (and one wake-up of that thread), and pages are never written out of order.
//! Neither the rendering nor the write is on the step's thread. The run's last
//! page is written before the run returns ([`PageWriter::flush`], which cuts
//! the wait short). The page is a view (rebuilt at every change), so it is
//! written without fsync ([`clawboard_core::Store::write_view`]).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long the writer lets changes gather before it renders the page.
const GATHER: Duration = Duration::from_millis(10);

use clawboard_core::{RelPath, Store};

pub(crate) struct PageWriter {
    inner: Arc<Inner>,
}

/// Renders the page as it is now.
type Render = Box<dyn Fn() -> String + Send + Sync>;

struct Inner {
    store: Store,
    rel: RelPath,
    task: String,
    render: Render,
    state: Mutex<State>,
    idle: Condvar,
    /// Wakes a writer that is letting changes gather (a flush is waiting).
    hurry: Condvar,
}

#[derive(Default)]
struct State {
    /// Changed since the writer last rendered the page.
    changed: bool,
    /// A writer is at work (it renders and writes until nothing changed).
    busy: bool,
    /// A flush waits: the writer renders at once.
    flushing: bool,
}

impl PageWriter {
    pub(crate) fn new(
        store: Store,
        rel: RelPath,
        task: String,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> PageWriter {
        let render: Render = Box::new(render);
        PageWriter {
            inner: Arc::new(Inner {
                store,
                rel,
                task,
                render,
                state: Mutex::new(State::default()),
                idle: Condvar::new(),
                hurry: Condvar::new(),
            }),
        }
    }

    /// The page changed: it is rendered and written off this thread, and returns at once.
    pub(crate) fn changed(&self) {
        let mut st = self.inner.state();
        st.changed = true;
        if st.busy {
            return;
        }
        st.busy = true;
        drop(st);
        let inner = Arc::clone(&self.inner);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || {
                    inner.gather();
                    inner.drain();
                });
            }
            Err(_) => inner.drain(),
        }
    }

    /// Renders and writes the page after the write in progress, if any: when this
    /// returns, the page on disk shows every change made before the call.
    pub(crate) fn flush(&self) {
        let mut st = self.inner.state();
        st.changed = true;
        st.flushing = true;
        self.inner.hurry.notify_all();
        while st.busy {
            st = self.inner.idle.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.busy = true;
        st.flushing = false;
        drop(st);
        self.inner.drain();
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits [`GATHER`], or less if a flush waits.
    fn gather(&self) {
        let st = self.state();
        let waited = self.hurry.wait_timeout_while(st, GATHER, |s| !s.flushing);
        drop(waited.unwrap_or_else(PoisonError::into_inner));
    }

    /// Renders and writes the page until nothing changed since, then marks the writer idle.
    fn drain(&self) {
        loop {
            {
                let mut st = self.state();
                if !st.changed {
                    st.busy = false;
                    self.idle.notify_all();
                    return;
                }
                st.changed = false;
            }
            // A render that panics leaves the page as it was, and the writer
            // goes on: were the panic to end this thread, `busy` would stay set
            // and the next flush (awaited by the task's drive) would wait forever.
            let text = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.render)())) {
                Ok(text) => text,
                Err(_) => {
                    tracing::error!(task = %self.task, "rendering status.md panicked; the page is left as it was");
                    continue;
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
    fn the_page_on_disk_shows_every_change_before_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        let rel = RelPath::new("tasks/t1/status.md").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
        rt.block_on(async {
            let page = Arc::new(Mutex::new(String::new()));
            // The threads each render ran on.
            let renders = Arc::new(Mutex::new(Vec::new()));
            let w = {
                let (page, renders) = (page.clone(), renders.clone());
                PageWriter::new(store.clone(), rel.clone(), "t1".into(), move || {
                    renders.lock().unwrap().push(std::thread::current().id());
                    page.lock().unwrap().clone()
                })
            };
            for i in 0..200 {
                *page.lock().unwrap() = format!("page {i}\n");
                w.changed();
            }
            // A change costs its caller no render.
            let me = std::thread::current().id();
            while renders.lock().unwrap().is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            assert!(!renders.lock().unwrap().contains(&me), "a change rendered the page on the caller's thread");
            *page.lock().unwrap() = "page final\n".into();
            w.flush();
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page final\n");
            // Nothing written later overwrites it.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page final\n");
            *page.lock().unwrap() = "page after\n".into();
            w.changed();
            *page.lock().unwrap() = "page after 2\n".into();
            w.flush();
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page after 2\n");

            // Changes a millisecond apart, within GATHER: one render for them
            // (two, if this machine stalls), not one each.
            renders.lock().unwrap().clear();
            for i in 0..5 {
                *page.lock().unwrap() = format!("quick {i}\n");
                w.changed();
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            tokio::time::sleep(GATHER * 5).await;
            assert_eq!(store.read_bytes(&rel).unwrap(), b"quick 4\n");
            let n = renders.lock().unwrap().len();
            assert!(n < 5, "{n} renders for 5 changes within {GATHER:?}");
        });
    }

    #[test]
    fn a_render_that_panics_leaves_the_page_and_the_next_flush_still_returns() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        let rel = RelPath::new("tasks/t1/status.md").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
        rt.block_on(async {
            let page = Arc::new(Mutex::new(String::from("page 1\n")));
            let w = {
                let page = page.clone();
                PageWriter::new(store.clone(), rel.clone(), "t1".into(), move || {
                    let text = page.lock().unwrap().clone();
                    assert!(text != "boom\n", "a render that panics");
                    text
                })
            };
            w.flush();
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page 1\n");
            // On the writer's thread, then on the flushing caller's.
            *page.lock().unwrap() = "boom\n".into();
            w.changed();
            tokio::time::sleep(GATHER * 5).await;
            w.flush();
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page 1\n");
            *page.lock().unwrap() = "page 2\n".into();
            w.changed();
            w.flush();
            assert_eq!(store.read_bytes(&rel).unwrap(), b"page 2\n");
        });
    }
}
