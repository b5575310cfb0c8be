//! [`Lock`]: a mutex for the daemon's in-memory bookkeeping (queues, sets of seen
//! ids, cached heartbeats) that is never poisoned.
//!
//! With `std::sync::Mutex`, a thread that panics while holding the lock poisons
//! it, and every later `lock()` returns an error. Code that answered that error
//! with `if let Ok(..)` silently skipped its work from then on (a task never
//! queued, an escalation never notified); code that propagated it turned one
//! panic into a permanent failure of the whole subsystem. The data held here is
//! simple collections whose every mutation is a single call, and `Arc`s swapped
//! whole (the config, the access policy), so it is whole after a panic elsewhere:
//! [`Lock::lock`] hands it out regardless. (Before, a poisoned policy lock read as
//! "no policy" and left role contexts unfiltered.)

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A mutex whose [`Lock::lock`] always succeeds (see the module header).
#[derive(Debug, Default)]
pub struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    pub const fn new(value: T) -> Lock<T> {
        Lock(Mutex::new(value))
    }

    /// Blocks until the lock is held; a panic in an earlier holder is ignored.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_while_holding_it_does_not_lock_others_out() {
        let lock = std::sync::Arc::new(Lock::new(vec![1]));
        let held = lock.clone();
        let panicked = std::thread::spawn(move || {
            let mut v = held.lock();
            v.push(2);
            panic!("a holder panics");
        })
        .join();
        assert!(panicked.is_err());
        lock.lock().push(3);
        assert_eq!(*lock.lock(), vec![1, 2, 3]);
    }
}
