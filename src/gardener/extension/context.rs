//! What a reconcile is given: the reconciler's settings, the client, actuator and caches
//! injected once, the observer of what it did, and the per-object retry backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::runtime::reflector::ObjectRef;

use crate::gardener::api::Extension;
use crate::gardener::cache::SharedCaches;
use crate::gardener::runtime::metrics::{
    Operation, OperationResult, ReconcileMetrics, ReconcileResult,
};

use super::events::OutcomeEvents;
use super::predicate::TriggerMode;

/// Settings of the Extension reconciler.
#[derive(Clone, Debug)]
pub struct ReconcilerConfig {
    /// The extension type (`spec.type`) this controller handles; also the finalizer suffix.
    pub extension_type: String,
    /// Extension classes handled (`--extension-classes`); empty means `shoot`.
    pub classes: Vec<String>,
    /// Requeue after a successful reconcile (`--resync-period`); zero disables it.
    pub resync: Duration,
    /// Deadline of one reconcile (Gardener: 3 minutes).
    pub timeout: Duration,
    /// What starts a reconcile (`--ignore-operation-annotation`).
    pub trigger: TriggerMode,
    /// Reconciles running at the same time (`--max-concurrent-reconciles`).
    pub max_concurrent: u16,
    /// Watch only this namespace (tests run many controllers on one API server).
    pub namespace: Option<String>,
}

impl ReconcilerConfig {
    /// Defaults that match Gardener's extension library for `extension_type`.
    pub fn new(extension_type: &str) -> ReconcilerConfig {
        ReconcilerConfig {
            extension_type: extension_type.to_string(),
            classes: Vec::new(),
            resync: Duration::from_secs(60 * 60),
            timeout: Duration::from_secs(3 * 60),
            trigger: TriggerMode::OperationAnnotation,
            max_concurrent: 5,
            namespace: None,
        }
    }

    /// `extensions.gardener.cloud/<type>`.
    pub fn finalizer(&self) -> String {
        format!("extensions.gardener.cloud/{}", self.extension_type)
    }
}

/// Receives what the reconciler did; the runtime turns it into metrics.
pub trait OperationObserver: Send + Sync {
    /// One actuator operation and how it ended.
    fn operation(&self, operation: Operation, result: OperationResult, elapsed: Duration);
    /// One call of the reconcile function.
    fn reconcile(&self, result: ReconcileResult, elapsed: Duration);
}

/// An observer that records nothing.
pub struct NoObserver;

impl OperationObserver for NoObserver {
    fn operation(&self, _: Operation, _: OperationResult, _: Duration) {}
    fn reconcile(&self, _: ReconcileResult, _: Duration) {}
}

/// Reports to the runtime's metric families under a controller name.
pub struct ControllerMetrics {
    pub metrics: ReconcileMetrics,
    pub controller: &'static str,
}

impl OperationObserver for ControllerMetrics {
    fn operation(&self, operation: Operation, result: OperationResult, elapsed: Duration) {
        self.metrics
            .observe(self.controller, operation, result, elapsed);
    }
    fn reconcile(&self, result: ReconcileResult, elapsed: Duration) {
        self.metrics
            .observe_reconcile(self.controller, result, elapsed);
    }
}

/// Everything a reconcile needs, injected once.
pub struct Context<A> {
    pub client: Client,
    pub actuator: A,
    pub caches: SharedCaches,
    pub config: ReconcilerConfig,
    pub observer: Arc<dyn OperationObserver>,
    /// Events on the Extension for each operation's outcome; none when unset.
    pub events: Option<OutcomeEvents>,
    /// Consecutive failures per object, for client-go's per-item exponential backoff.
    failures: Mutex<HashMap<ObjectRef<Extension>, u32>>,
}

impl<A> Context<A> {
    pub fn new(
        client: Client,
        actuator: A,
        caches: SharedCaches,
        config: ReconcilerConfig,
        observer: Arc<dyn OperationObserver>,
    ) -> Context<A> {
        Context {
            client,
            actuator,
            caches,
            config,
            observer,
            events: None,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Also records an Event on the Extension for each operation's outcome.
    pub fn with_events(self, events: OutcomeEvents) -> Context<A> {
        Context {
            events: Some(events),
            ..self
        }
    }

    pub(super) fn reset_failures(&self, key: &ObjectRef<Extension>) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }

    /// The delay before retrying a failed object: client-go's per-item exponential backoff
    /// (5 ms doubling up to 1000 s).
    pub fn next_backoff(&self, key: &ObjectRef<Extension>) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        item_backoff(n)
    }
}

/// client-go's `ItemExponentialFailureRateLimiter(5ms, 1000s)` for the n-th failure.
pub fn item_backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(5);
    let max = Duration::from_secs(1000);
    let exp = failures.saturating_sub(1).min(30);
    base.checked_mul(1u32 << exp).map_or(max, |d| d.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_client_go() {
        assert_eq!(item_backoff(1), Duration::from_millis(5));
        assert_eq!(item_backoff(2), Duration::from_millis(10));
        assert_eq!(item_backoff(11), Duration::from_millis(5 * 1024));
        assert_eq!(item_backoff(40), Duration::from_secs(1000));
        assert_eq!(item_backoff(u32::MAX), Duration::from_secs(1000));
    }

    #[test]
    fn finalizer_is_prefixed_with_the_extensions_group() {
        assert_eq!(
            ReconcilerConfig::new("containerd-shim").finalizer(),
            "extensions.gardener.cloud/containerd-shim"
        );
    }
}
