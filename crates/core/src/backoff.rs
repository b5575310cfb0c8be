//! How long a retry waits: one [`Backoff`] for every place that tries again (the
//! daemon's jobs, the bucket, the git remote, the archive, notifications, intake,
//! a step's retries, an LLM endpoint that is busy, deferred writes).

use std::time::Duration;

/// The wait before each retry: `first`, doubling with each retry, never above
/// `max`. With `jitter`, a uniformly random part between half and all of that
/// wait, so nodes and jobs that failed together do not retry together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub jitter: bool,
}

impl Backoff {
    /// Doubling from `first` up to `max`, without jitter.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max, jitter: false }
    }

    /// The same, with jitter.
    pub const fn jittered(self) -> Backoff {
        Backoff { jitter: true, ..self }
    }

    /// The wait before retry `retry` (0: the first retry): `first · 2^retry`,
    /// capped at `max`, then jittered if asked.
    pub fn delay(&self, retry: u32) -> Duration {
        let whole = self.first.saturating_mul(1u32 << retry.min(30)).min(self.max);
        if self.jitter { whole.mul_f64(0.5 + unit() / 2.0) } else { whole }
    }
}

/// A uniform number in [0, 1) from the OS's random source (0.5 if it fails:
/// jitter is a courtesy to the server, not a guarantee).
fn unit() -> f64 {
    let mut r = [0u8; 8];
    match getrandom::fill(&mut r) {
        Ok(()) => (u64::from_le_bytes(r) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn doubles_from_first_and_stops_at_max() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let waits: Vec<u128> = (0..8).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5), "no overflow on a huge retry count");
    }

    #[test]
    fn jitter_stays_between_half_and_all_of_the_wait_and_varies() {
        let b = Backoff::new(Duration::from_millis(10), Duration::from_secs(1)).jittered();
        for n in 0..12 {
            let whole = Backoff { jitter: false, ..b }.delay(n);
            let d = b.delay(n);
            assert!(d >= whole / 2 && d <= whole, "retry {n}: {d:?} outside [{:?}, {whole:?}]", whole / 2);
        }
        let spread: HashSet<Duration> = (0..20).map(|_| b.delay(3)).collect();
        assert!(spread.len() > 1, "jitter varies the wait");
    }
}
