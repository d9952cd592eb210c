//! What the controller remembers per Extension between reconciles.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;

use crate::gardener::api::{Condition, Extension};

/// The first retry after a failed reconcile comes after this long; each further failure
/// doubles it.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Conditions this controller wrote that the Extension cache has not shown yet.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PendingWrite {
    /// The resourceVersion our write produced.
    pub version: String,
    /// The conditions we wrote.
    pub conditions: Vec<Condition>,
    /// When we wrote them.
    pub at: Instant,
}

#[derive(Debug, Default)]
struct Entry {
    /// Our last write, until the cache delivers it (the watch delivers an object's versions
    /// in order, so once it has shown this version, everything it shows later is newer).
    pending: Option<PendingWrite>,
    /// Reconciles that failed in a row.
    failures: u32,
    /// Since when its checks give way to a lifecycle backlog (see `backlog`).
    waiting_since: Option<Instant>,
}

/// Per-Extension memory, shared by the event filter, the reconciler and the error policy.
#[derive(Debug, Default)]
pub(crate) struct Bookkeeping {
    entries: Mutex<HashMap<ObjectRef<Extension>, Entry>>,
}

impl Bookkeeping {
    fn entries(&self) -> MutexGuard<'_, HashMap<ObjectRef<Extension>, Entry>> {
        // Nothing holding the lock can leave the map half-updated, so a poisoned lock is safe
        // to use.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn pending(&self, key: &ObjectRef<Extension>) -> Option<PendingWrite> {
        self.entries().get(key).and_then(|e| e.pending.clone())
    }

    pub(crate) fn set_pending(&self, key: &ObjectRef<Extension>, pending: Option<PendingWrite>) {
        self.entries().entry(key.clone()).or_default().pending = pending;
    }

    /// The cache shows `version` of the Extension: a pending write of that version is no
    /// longer pending.
    pub(crate) fn observe_version(&self, key: &ObjectRef<Extension>, version: Option<&str>) {
        if let Some(entry) = self.entries().get_mut(key)
            && entry
                .pending
                .as_ref()
                .is_some_and(|p| Some(p.version.as_str()) == version)
        {
            entry.pending = None;
        }
    }

    /// Counts a failed reconcile and returns how many failed in a row.
    pub(crate) fn record_failure(&self, key: &ObjectRef<Extension>) -> u32 {
        let mut entries = self.entries();
        let entry = entries.entry(key.clone()).or_default();
        entry.failures = entry.failures.saturating_add(1);
        entry.failures
    }

    pub(crate) fn clear_failures(&self, key: &ObjectRef<Extension>) {
        if let Some(entry) = self.entries().get_mut(key) {
            entry.failures = 0;
        }
    }

    pub(crate) fn waiting_since(&self, key: &ObjectRef<Extension>) -> Option<Instant> {
        self.entries().get(key).and_then(|e| e.waiting_since)
    }

    /// The Extension's check gives way to a backlog from `now`, unless it already does.
    pub(crate) fn start_waiting(&self, key: &ObjectRef<Extension>, now: Instant) {
        let mut entries = self.entries();
        let entry = entries.entry(key.clone()).or_default();
        entry.waiting_since.get_or_insert(now);
    }

    pub(crate) fn stop_waiting(&self, key: &ObjectRef<Extension>) {
        if let Some(entry) = self.entries().get_mut(key) {
            entry.waiting_since = None;
        }
    }

    pub(crate) fn forget(&self, key: &ObjectRef<Extension>) {
        self.entries().remove(key);
    }

    pub(crate) fn retain(&self, mut keep: impl FnMut(&ObjectRef<Extension>) -> bool) {
        self.entries().retain(|key, _| keep(key));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }
}

/// The delay before retrying after `failures` failed reconciles in a row: exponential from
/// [`FIRST_RETRY`], but never longer than `cap` (the period: a failing Extension is retried at
/// least as often as a healthy one is checked).
pub(crate) fn retry_delay(failures: u32, cap: Duration) -> Duration {
    let exponent = failures.saturating_sub(1).min(20);
    FIRST_RETRY.saturating_mul(1 << exponent).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectRef<Extension> {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        let cap = Duration::from_secs(30);
        let delays: Vec<u64> = (1..=7).map(|n| retry_delay(n, cap).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry_delay(0, cap), FIRST_RETRY);
        assert_eq!(retry_delay(u32::MAX, cap), cap);
        assert_eq!(
            retry_delay(3, Duration::from_millis(500)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn failures_count_until_cleared_and_versions_are_remembered() {
        let b = Bookkeeping::default();
        assert_eq!(b.record_failure(&key("a")), 1);
        assert_eq!(b.record_failure(&key("a")), 2);
        b.clear_failures(&key("a"));
        assert_eq!(b.record_failure(&key("a")), 1);
        assert_eq!(b.pending(&key("a")), None);
        let written = PendingWrite {
            version: "7".into(),
            conditions: Vec::new(),
            at: Instant::now(),
        };
        b.set_pending(&key("a"), Some(written.clone()));
        b.observe_version(&key("a"), Some("6"));
        assert_eq!(b.pending(&key("a")), Some(written.clone()));
        b.observe_version(&key("a"), Some("7"));
        assert_eq!(b.pending(&key("a")), None);
        let now = Instant::now();
        b.start_waiting(&key("a"), now);
        b.start_waiting(&key("a"), now + Duration::from_secs(5));
        assert_eq!(
            b.waiting_since(&key("a")),
            Some(now),
            "the first wait counts"
        );
        b.stop_waiting(&key("a"));
        assert_eq!(b.waiting_since(&key("a")), None);
        b.set_pending(&key("b"), Some(written));
        b.retain(|k| k.name == "b");
        assert_eq!(b.len(), 1);
        b.forget(&key("b"));
        assert_eq!(b.len(), 0);
    }
}
