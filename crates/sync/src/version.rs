//! Versions of a file across nodes: a hybrid logical clock stamps each change, and
//! a version vector (node → that node's last stamp in the file's history) tells
//! whether one version descends from another or the two are concurrent.
//!
//! An HLC stamp is `physical_ms << 16 | counter`: it never runs backwards on a node,
//! it is above every stamp the node has seen from others, and it stays close to the
//! wall clock, so "later" means later for humans too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clawboard_core::lock::Lock;

use crate::error::{Error, Result};

/// node → HLC stamp of that node's last change in the file's history.
pub type Vv = BTreeMap<String, u64>;

/// How one version relates to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Same,
    /// Its history is contained in the other's.
    Older,
    /// It contains the other's history.
    Newer,
    /// Neither contains the other: both changed since a common version.
    Concurrent,
}

/// How `a` relates to `b`.
pub fn compare(a: &Vv, b: &Vv) -> Order {
    let (mut a_more, mut b_more) = (false, false);
    for (node, &x) in a {
        match b.get(node) {
            Some(&y) if x < y => b_more = true,
            Some(&y) if x > y => a_more = true,
            Some(_) => {}
            None => a_more = true,
        }
    }
    if b.keys().any(|n| !a.contains_key(n)) {
        b_more = true;
    }
    match (a_more, b_more) {
        (false, false) => Order::Same,
        (false, true) => Order::Older,
        (true, false) => Order::Newer,
        (true, true) => Order::Concurrent,
    }
}

/// `a` := the least version vector containing both.
pub fn merge(a: &mut Vv, b: &Vv) {
    for (node, &y) in b {
        let x = a.entry(node.clone()).or_insert(0);
        *x = (*x).max(y);
    }
}

/// `node=stamp,node=stamp` (object metadata is plain ASCII text).
pub fn encode(vv: &Vv) -> String {
    vv.iter().map(|(n, t)| format!("{n}={t}")).collect::<Vec<_>>().join(",")
}

pub fn decode(s: &str) -> Option<Vv> {
    if s.is_empty() {
        return Some(Vv::new());
    }
    s.split(',')
        .map(|part| {
            let (n, t) = part.split_once('=')?;
            Some((n.to_owned(), t.parse().ok()?))
        })
        .collect()
}

/// The wall-clock part of a stamp, in ms since the epoch.
pub fn physical_ms(stamp: u64) -> u64 {
    stamp >> 16
}

/// A stamp as compact UTC text for file names: `20261122T043403.123Z`.
pub fn stamp_text(stamp: u64) -> String {
    let ms = i64::try_from(physical_ms(stamp)).unwrap_or(i64::MAX);
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%Y%m%dT%H%M%S%.3fZ").to_string(),
        None => stamp.to_string(),
    }
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// This node's hybrid logical clock, persisted so a restart never goes back.
pub struct Clock {
    last: Lock<u64>,
    /// The value last written to disk (saving is skipped while it has not moved).
    saved: Lock<u64>,
    path: PathBuf,
}

impl Clock {
    /// Loads `dir/hlc` (0 when absent).
    pub fn load(dir: &Path) -> Result<Clock> {
        let path = dir.join("hlc");
        let last = match std::fs::read_to_string(&path) {
            Ok(s) => s.trim().parse().unwrap_or(0),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(Error::io(&path, e)),
        };
        Ok(Clock { last: Lock::new(last), saved: Lock::new(last), path })
    }

    fn update(&self, f: impl FnOnce(u64) -> u64) -> u64 {
        let mut last = self.last.lock();
        *last = f(*last);
        *last
    }

    /// A stamp for an event that happened at `event_ms` (e.g. a file's mtime), above
    /// every stamp this clock has issued or seen.
    pub fn tick_at(&self, event_ms: u64) -> u64 {
        self.update(|last| {
            let physical = event_ms.min(wall_ms().max(physical_ms(last)));
            if physical > physical_ms(last) { physical << 16 } else { last.saturating_add(1) }
        })
    }

    /// A stamp for now.
    pub fn now(&self) -> u64 {
        self.tick_at(wall_ms())
    }

    /// Takes in a stamp seen from another node.
    /// A stamp more than a day ahead of this machine's clock is taken as a day ahead
    /// (a broken or hostile clock elsewhere must not push this one to the end of time).
    pub fn observe(&self, stamp: u64) {
        let ceiling = wall_ms().saturating_add(86_400_000) << 16;
        self.update(|last| last.max(stamp.min(ceiling)));
    }

    /// Writes the clock (after a push or pull), unless it has not moved since.
    pub fn save(&self) -> Result<()> {
        let last = *self.last.lock();
        let mut saved = self.saved.lock();
        if *saved == last {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        clawboard_core::store::write_atomic(dir, "hlc", format!("{last}\n").as_bytes())?;
        *saved = last;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vv(pairs: &[(&str, u64)]) -> Vv {
        pairs.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect()
    }

    #[test]
    fn compare_orders_histories() {
        assert_eq!(compare(&vv(&[("a", 1)]), &vv(&[("a", 1)])), Order::Same);
        assert_eq!(compare(&vv(&[("a", 1)]), &vv(&[("a", 2)])), Order::Older);
        assert_eq!(compare(&vv(&[("a", 1), ("b", 3)]), &vv(&[("a", 1)])), Order::Newer);
        assert_eq!(compare(&vv(&[("a", 2)]), &vv(&[("b", 1)])), Order::Concurrent);
        assert_eq!(compare(&vv(&[]), &vv(&[("b", 1)])), Order::Older);
        let mut m = vv(&[("a", 2), ("b", 1)]);
        merge(&mut m, &vv(&[("b", 5), ("c", 1)]));
        assert_eq!(m, vv(&[("a", 2), ("b", 5), ("c", 1)]));
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let v = vv(&[("node-a", 42), ("node-b", 7)]);
        assert_eq!(decode(&encode(&v)), Some(v));
        assert_eq!(decode(""), Some(Vv::new()));
        assert_eq!(decode("a=x"), None);
        assert_eq!(decode("a"), None);
    }

    #[test]
    fn the_clock_never_goes_back_and_passes_what_it_saw() {
        let d = tempfile::tempdir().unwrap();
        let c = Clock::load(d.path()).unwrap();
        let a = c.now();
        let b = c.tick_at(0);
        assert!(b > a, "an old event still gets a later stamp");
        let far = (wall_ms() + 3_600_000) << 16;
        c.observe(far);
        assert!(c.now() > far);
        c.save().unwrap();
        assert!(Clock::load(d.path()).unwrap().now() > far, "persisted across a restart");
        assert!(stamp_text(a).starts_with("20"), "{}", stamp_text(a));
        c.observe(u64::MAX);
        let next = c.now();
        assert!(next > far && physical_ms(next) <= wall_ms() + 86_400_000, "a hostile stamp is capped");
    }
}
