//! What the controller remembers per Extension between reconciles.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;

use crate::gardener::api::Extension;

/// The first retry after a failed reconcile comes after this long; each further failure
/// doubles it.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Entry {
    /// The newest resourceVersion of the Extension this controller knows of (from its own
    /// write or its own read). A cached copy with another version may predate our write.
    known_version: Option<String>,
    /// Reconciles that failed in a row.
    failures: u32,
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

    pub(crate) fn known_version(&self, key: &ObjectRef<Extension>) -> Option<String> {
        self.entries()
            .get(key)
            .and_then(|e| e.known_version.clone())
    }

    pub(crate) fn set_known_version(&self, key: &ObjectRef<Extension>, version: Option<String>) {
        self.entries().entry(key.clone()).or_default().known_version = version;
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
        assert_eq!(b.known_version(&key("a")), None);
        b.set_known_version(&key("a"), Some("7".into()));
        assert_eq!(b.known_version(&key("a")).as_deref(), Some("7"));
        b.set_known_version(&key("b"), Some("9".into()));
        b.retain(|k| k.name == "b");
        assert_eq!(b.len(), 1);
        b.forget(&key("b"));
        assert_eq!(b.len(), 0);
    }
}
