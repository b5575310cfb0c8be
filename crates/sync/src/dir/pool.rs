//! The local-directory backend's own threads, at a lower CPU priority.
//!
//! A push to a directory is file system work: two files created, written and
//! fsynced per object, renames, a directory fsync. On tokio's blocking pool, a
//! push of `concurrency` objects ran as that many threads beside the daemon's
//! roles, and on a machine with few cores they took the CPU from the steps the
//! push was only copying: a daemon's step on two cores went from 1.2 ms to
//! 10-18 ms at p99 while its last task was being pushed
//! (`scripts/bench/daemon-steps.sh`, docs/BENCHMARKS.md). Here the work runs on
//! as many threads as there are cores, each [`NICE`] steps nicer than the
//! process: a push still uses an idle machine in full, and yields to the roles
//! on a busy one.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use crate::error::{Failure, RemoteError};

/// How much nicer than the process the threads are.
pub const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub struct Pool {
    tx: Sender<Job>,
}

impl Pool {
    /// Starts one thread per core (at least two); they end when the pool is dropped.
    pub fn start(name: &str) -> std::io::Result<Pool> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new().name(name.to_owned()).spawn(move || serve(&rx))?;
        }
        Ok(Pool { tx })
    }

    /// Runs `f` on one of the pool's threads; a panic in it is an error.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, RemoteError> + Send + 'static,
    ) -> Result<T, RemoteError> {
        let gone = || RemoteError::new(Failure::Permanent, "TASK", "", "the local-directory backend's threads stopped");
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
                Err(RemoteError::new(Failure::Permanent, "TASK", "", "a local-directory operation panicked"))
            });
            // The caller may have stopped waiting (its push was cancelled).
            let _ = done.send(outcome);
        });
        self.tx.send(job).map_err(|_| gone())?;
        result.await.map_err(|_| gone())?
    }
}

fn serve(rx: &Mutex<Receiver<Job>>) {
    lower_priority();
    loop {
        // The lock is held only to take a job, never while running one.
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return, // the pool was dropped
        }
    }
}

/// This thread (only it: on Linux the nice value is per thread) [`NICE`] steps
/// nicer than it was, as far as 19.
fn lower_priority() {
    let me = rustix::thread::gettid();
    let lowered = rustix::process::getpriority_process(Some(me))
        .and_then(|now| rustix::process::setpriority_process(Some(me), (now + NICE).min(19)));
    if let Err(e) = lowered {
        // Still correct at the normal priority, only less polite.
        tracing::debug!("cannot lower the priority of a local-directory thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[tokio::test]
    async fn runs_jobs_on_threads_at_a_lower_priority() {
        let pool = Pool::start("test-pool").unwrap();
        let (theirs, name) =
            pool.run(|| Ok((nice_of_this_thread(), std::thread::current().name().map(str::to_owned)))).await.unwrap();
        assert_eq!(theirs, (nice_of_this_thread() + NICE).min(19), "the pool's threads run {NICE} below");
        assert_eq!(name.as_deref(), Some("test-pool"));
    }

    #[tokio::test]
    async fn a_job_that_fails_or_panics_is_an_error_and_the_pool_goes_on() {
        let pool = Pool::start("test-pool").unwrap();
        let failed = pool.run(|| Err::<(), _>(RemoteError::new(Failure::Retryable, "PUT", "k", "disk full"))).await;
        assert!(failed.unwrap_err().to_string().contains("disk full"));
        let panicked = pool.run(|| -> Result<(), RemoteError> { panic!("boom") }).await;
        assert!(panicked.unwrap_err().to_string().contains("panicked"));
        // Every thread still serves (more jobs than threads, each answered).
        for i in 0..16 {
            assert_eq!(pool.run(move || Ok(i)).await.unwrap(), i);
        }
    }
}
