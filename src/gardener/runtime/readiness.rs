//! Readiness and liveness, with Gardener's `informer-sync` rules:
//!
//! - `/readyz` fails while any registered check (typically a watch cache) has not synced, so a
//!   replica gets traffic and counts as available only once it can answer from its caches.
//!   Being the leader does not matter: stand-by replicas must be Ready, or a rolling update
//!   would never finish.
//! - `/healthz` passes while the process runs, except when a check has stayed unsynced for the
//!   sync timeout (3 minutes) since it was registered: a cache that never syncs (lost watch
//!   permissions, a wedged connection) is fixed by a restart, which a liveness failure causes.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::options::format_duration;

/// The registry of readiness checks. Clones share the same checks.
#[derive(Clone, Debug)]
pub struct Readiness {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sync_timeout: Duration,
    checks: Mutex<Vec<Check>>,
}

#[derive(Debug)]
struct Check {
    name: String,
    registered: Instant,
    synced: Arc<AtomicBool>,
}

/// Marks one registered check as passed. Dropping it without marking leaves the check failing.
#[derive(Clone, Debug)]
pub struct SyncHandle {
    name: String,
    synced: Arc<AtomicBool>,
}

impl SyncHandle {
    /// The check passes from now on.
    pub fn mark_synced(&self) {
        if !self.synced.swap(true, Ordering::AcqRel) {
            tracing::info!(check = %self.name, "Cache synced");
        }
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The result of a health or readiness probe: whether it passed and the text to answer with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    pub ok: bool,
    pub body: String,
}

impl Readiness {
    /// A registry whose unsynced checks fail `/healthz` after `sync_timeout`.
    pub fn new(sync_timeout: Duration) -> Readiness {
        Readiness {
            inner: Arc::new(Inner {
                sync_timeout,
                checks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Adds a check that fails until the returned handle is marked synced. Register before the
    /// manager runs (or synchronously in a controller's factory), so `/readyz` never passes
    /// before the check exists.
    pub fn register(&self, name: impl Into<String>) -> SyncHandle {
        let name = name.into();
        let synced = Arc::new(AtomicBool::new(false));
        self.checks().push(Check {
            name: name.clone(),
            registered: Instant::now(),
            synced: synced.clone(),
        });
        SyncHandle { name, synced }
    }

    /// The names of the checks that have not passed yet.
    pub fn unsynced(&self) -> Vec<String> {
        self.checks()
            .iter()
            .filter(|c| !c.synced.load(Ordering::Acquire))
            .map(|c| c.name.clone())
            .collect()
    }

    /// The `/readyz` answer.
    pub fn readyz(&self) -> ProbeReport {
        let unsynced = self.unsynced();
        if unsynced.is_empty() {
            return ProbeReport {
                ok: true,
                body: "ok".to_string(),
            };
        }
        ProbeReport {
            ok: false,
            body: format!(
                "[-]informer-sync failed: not synced: {}\nreadyz check failed\n",
                unsynced.join(", ")
            ),
        }
    }

    /// The `/healthz` answer now.
    pub fn healthz(&self) -> ProbeReport {
        self.healthz_at(Instant::now())
    }

    /// The `/healthz` answer at `now`; tests pass a time instead of waiting for it.
    pub fn healthz_at(&self, now: Instant) -> ProbeReport {
        let timeout = self.inner.sync_timeout;
        let overdue: Vec<String> = self
            .checks()
            .iter()
            .filter(|c| {
                !c.synced.load(Ordering::Acquire)
                    && now.saturating_duration_since(c.registered) >= timeout
            })
            .map(|c| c.name.clone())
            .collect();
        if overdue.is_empty() {
            return ProbeReport {
                ok: true,
                body: "ok".to_string(),
            };
        }
        let mut body = String::from("[+]ping ok\n");
        let _ = writeln!(
            body,
            "[-]informer-sync failed: not synced within {}: {}",
            format_duration(timeout),
            overdue.join(", ")
        );
        body.push_str("healthz check failed\n");
        ProbeReport { ok: false, body }
    }

    fn checks(&self) -> std::sync::MutexGuard<'_, Vec<Check>> {
        // The lock only guards pushes and reads of a Vec; a panic while holding it cannot
        // leave the Vec half-changed, so a poisoned lock is still usable.
        self.inner
            .checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(180);

    #[test]
    fn nothing_registered_is_ready_and_healthy() {
        let r = Readiness::new(TIMEOUT);
        assert!(r.readyz().ok);
        assert!(r.healthz().ok);
    }

    #[test]
    fn readyz_fails_until_every_check_is_synced_and_names_the_missing_ones() {
        let r = Readiness::new(TIMEOUT);
        let extensions = r.register("extension-cache");
        let clusters = r.register("cluster-cache");
        let report = r.readyz();
        assert!(!report.ok);
        assert!(
            report.body.contains("extension-cache, cluster-cache"),
            "{}",
            report.body
        );
        extensions.mark_synced();
        let report = r.readyz();
        assert!(!report.ok);
        assert!(
            !report.body.contains("extension-cache") && report.body.contains("cluster-cache"),
            "{}",
            report.body
        );
        clusters.mark_synced();
        assert_eq!(
            r.readyz(),
            ProbeReport {
                ok: true,
                body: "ok".into()
            }
        );
        assert!(clusters.is_synced());
    }

    #[test]
    fn healthz_fails_only_after_the_sync_timeout() {
        let r = Readiness::new(TIMEOUT);
        let handle = r.register("extension-cache");
        let start = Instant::now();
        assert!(r.healthz_at(start).ok);
        assert!(r.healthz_at(start + TIMEOUT - Duration::from_secs(1)).ok);
        let report = r.healthz_at(start + TIMEOUT + Duration::from_millis(1));
        assert!(!report.ok);
        assert!(
            report.body.contains("extension-cache") && report.body.contains("3m0s"),
            "{}",
            report.body
        );
        // Syncing late heals liveness again: the cache works now.
        handle.mark_synced();
        assert!(r.healthz_at(start + TIMEOUT * 2).ok);
    }

    #[test]
    fn synced_checks_never_fail_liveness() {
        let r = Readiness::new(TIMEOUT);
        r.register("synced").mark_synced();
        let _late = r.register("pending");
        assert!(r.healthz_at(Instant::now()).ok);
        let report = r.healthz_at(Instant::now() + TIMEOUT * 10);
        assert!(!report.ok);
        assert!(
            report.body.contains("pending") && !report.body.contains("synced,"),
            "{}",
            report.body
        );
    }

    #[test]
    fn clones_share_checks() {
        let r = Readiness::new(TIMEOUT);
        let clone = r.clone();
        let handle = clone.register("x");
        assert!(!r.readyz().ok);
        handle.clone().mark_synced();
        assert!(r.readyz().ok);
        assert_eq!(handle.name(), "x");
    }
}
