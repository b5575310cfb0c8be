//! This node's lease on the tasks it claimed: how long it may still act on them
//! without having heard from the bucket.
//!
//! Another node takes a task over only after this node's heartbeat object has
//! not changed for `sync.lease` of the taker's own time, and only if it is still
//! the same object when it re-reads it just before the conditional write of the
//! claim. So while this node's last heartbeat *started* less than `sync.lease` ago,
//! no taker can have won any of its claims. The lease is that window, less a
//! margin (an eighth of it, at least 250 ms) for the time between checking it and
//! acting.
//!
//! Time here is the machine's boot clock ([`Moment`]), which goes on while the
//! machine is suspended: a node that slept through its lease wakes up knowing it.
//! Takers wait the longer of their own `sync.lease` and the one this node's
//! heartbeat names (`lease_ms`), so nodes configured apart are safe too.
//!
//! An **epoch** is an unbroken chain of heartbeats: each one landed before the
//! previous one's lease ran out. A claim is trusted only in the epoch it was
//! confirmed in (created, taken over, or renewed with `If-Match` on its ETag, all
//! after the epoch's first heartbeat): after a restart, or after a gap long enough
//! for a takeover, every claim is renewed before the task's next step.

use std::collections::HashMap;
use std::time::Duration;

use clawboard_core::lock::Lock;
use tokio::sync::watch;

/// A point on the boot clock (`CLOCK_BOOTTIME`): monotonic like
/// [`std::time::Instant`], but counting the time the machine was suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(Duration);

impl Moment {
    pub fn now() -> Moment {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        // The boot clock is never negative; `unwrap_or` only satisfies the types.
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        let nanos = u32::try_from(t.tv_nsec).unwrap_or(0);
        Moment(Duration::new(secs, nanos))
    }

    /// The time since this moment (zero for one in the future).
    pub fn elapsed(self) -> Duration {
        Moment::now().0.saturating_sub(self.0)
    }
}

#[derive(Debug, Default)]
struct State {
    /// When the last heartbeat that landed was started.
    since: Option<Moment>,
    epoch: u64,
    /// Task → the epoch its claim was last confirmed in.
    confirmed: HashMap<String, u64>,
}

/// This node's lease (see the module docs). Enforced only where heartbeats are
/// written (the daemon); a one-off command holds none and is not held back.
#[derive(Debug)]
pub struct Lease {
    length: Duration,
    state: Lock<State>,
    enforced: std::sync::atomic::AtomicBool,
    /// Bumped on every change, so waiters wake.
    changed: watch::Sender<u64>,
}

impl Lease {
    pub fn new(length: Duration) -> Lease {
        Lease {
            length,
            state: Lock::new(State::default()),
            enforced: std::sync::atomic::AtomicBool::new(false),
            changed: watch::channel(0).0,
        }
    }

    /// The part of the lease this node acts in: `sync.lease` less the margin.
    fn usable(&self) -> Duration {
        self.length.saturating_sub((self.length / 8).max(Duration::from_millis(250)))
    }

    /// From now on, acting on a claimed task needs the lease (the daemon's heartbeats run).
    pub fn enforce(&self) {
        self.enforced.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn enforced(&self) -> bool {
        self.enforced.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A heartbeat started at `started` landed now. It continues the epoch if it
    /// landed within the lease of the previous one; otherwise a new epoch begins,
    /// in which no claim is confirmed yet.
    pub fn landed(&self, started: Moment) {
        {
            let mut s = self.state.lock();
            let unbroken = s.since.is_some_and(|prev| prev.elapsed() < self.length);
            if !unbroken {
                s.epoch += 1;
                if s.epoch > 1 {
                    tracing::warn!(
                        epoch = s.epoch,
                        "this node's heartbeats lapsed for longer than the lease: its claims are renewed before its tasks go on"
                    );
                }
            }
            s.since = Some(started);
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// True while this node's last heartbeat is recent enough to act on its claims.
    pub fn live(&self) -> bool {
        self.state.lock().since.is_some_and(|s| s.elapsed() < self.usable())
    }

    /// The current epoch (0 before the first heartbeat).
    pub fn epoch(&self) -> u64 {
        self.state.lock().epoch
    }

    /// `task`'s claim was confirmed (created, taken over or renewed) by a request
    /// started in `epoch`.
    pub fn confirm(&self, task: &str, epoch: u64) {
        self.state.lock().confirmed.insert(task.to_owned(), epoch);
        self.changed.send_modify(|n| *n += 1);
    }

    /// This node no longer holds `task`.
    pub fn forget(&self, task: &str) {
        self.state.lock().confirmed.remove(task);
        self.changed.send_modify(|n| *n += 1);
    }

    /// True if `task`'s claim was confirmed in the current epoch (it may need renewing otherwise).
    pub fn confirmed(&self, task: &str) -> bool {
        let s = self.state.lock();
        s.epoch > 0 && s.confirmed.get(task) == Some(&s.epoch)
    }

    /// True if this node may act on `task` now: its claim confirmed in this epoch, the lease live.
    pub fn holds(&self, task: &str) -> bool {
        self.confirmed(task) && self.live()
    }

    /// Wakes on the next change (a heartbeat landed, a claim confirmed or
    /// forgotten) after this call: `changed().await` on the receiver.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        let mut rx = self.changed.subscribe();
        rx.borrow_and_update();
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_holds_only_in_its_epoch_and_while_the_lease_is_live() {
        let lease = Lease::new(Duration::from_millis(400));
        assert!(!lease.live(), "no heartbeat yet");
        lease.confirm("t1", lease.epoch());
        assert!(!lease.holds("t1"), "confirmed before the first heartbeat");
        lease.landed(Moment::now());
        assert_eq!(lease.epoch(), 1);
        assert!(lease.live());
        assert!(!lease.holds("t1"), "epoch 0's confirmation does not count");
        lease.confirm("t1", lease.epoch());
        assert!(lease.holds("t1"));
        // A beat within the lease keeps the epoch.
        std::thread::sleep(Duration::from_millis(100));
        lease.landed(Moment::now());
        assert_eq!(lease.epoch(), 1);
        assert!(lease.holds("t1"));
        // Silent for the usable part (400 − 250 ms): no longer live, still confirmed.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!lease.live());
        assert!(!lease.holds("t1"));
        assert!(lease.confirmed("t1"));
        // Past the whole lease: the next beat starts a new epoch.
        std::thread::sleep(Duration::from_millis(250));
        lease.landed(Moment::now());
        assert_eq!(lease.epoch(), 2);
        assert!(lease.live());
        assert!(!lease.holds("t1"), "must be renewed");
        lease.confirm("t1", 2);
        assert!(lease.holds("t1"));
        lease.forget("t1");
        assert!(!lease.holds("t1"));
    }
}
