//! The metric families every controller reports, named like controller-runtime's so that
//! Gardener's dashboards and alerts for Go extensions apply unchanged, plus the extension
//! operations Gardener cares about.
//!
//! Labels are bounded on purpose: a controller name (a `&'static str` from the code), a result
//! and an operation from fixed sets. Object names and namespaces never become labels; a seed
//! with thousands of shoots would otherwise grow the series without bound.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// The outcome of one call of a reconcile function, as controller-runtime labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Done; nothing scheduled.
    Success,
    /// Failed; retried with backoff.
    Error,
    /// Asked to be retried with backoff without an error.
    Requeue,
    /// Asked to be called again after a fixed time.
    RequeueAfter,
}

impl ReconcileResult {
    pub const ALL: [ReconcileResult; 4] = [
        Self::Success,
        Self::Error,
        Self::Requeue,
        Self::RequeueAfter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Requeue => "requeue",
            Self::RequeueAfter => "requeue_after",
        }
    }
}

/// The Gardener operation an extension controller performed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Reconcile,
    Delete,
    ForceDelete,
    Migrate,
    Restore,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Reconcile => "reconcile",
            Self::Delete => "delete",
            Self::ForceDelete => "force_delete",
            Self::Migrate => "migrate",
            Self::Restore => "restore",
        }
    }
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperationResult {
    Succeeded,
    Error,
    /// Not performed, e.g. because the shoot has failed or the object was migrated.
    Skipped,
    /// Still under way; the operation is asked again later.
    InProgress,
}

impl OperationResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Error => "error",
            Self::Skipped => "skipped",
            Self::InProgress => "in_progress",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    controller: &'static str,
    operation: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationDurationLabels {
    controller: &'static str,
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`, so that
/// histogram quantiles compare with Go extensions.
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Operations wait for ManagedResources to be applied and can take minutes; gardenlet's
/// timeouts are in the same range.
const OPERATION_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

fn operation_histogram() -> Histogram {
    Histogram::new(OPERATION_BUCKETS)
}

/// Registers `metric` and returns it; clones share their series, so it is the handle that
/// updates what the registry encodes.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The handle controllers report through. Cheap to clone; every clone updates the same series.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    reconcile_total: Family<ReconcileLabels, Counter>,
    reconcile_errors_total: Family<ControllerLabels, Counter>,
    reconcile_time_seconds: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    operations_total: Family<OperationLabels, Counter>,
    operation_duration_seconds: Family<OperationDurationLabels, Histogram, fn() -> Histogram>,
}

impl ReconcileMetrics {
    /// Registers the families in `registry`.
    pub fn register(registry: &mut Registry) -> ReconcileMetrics {
        // Counter names get their `_total` suffix from the encoder.
        ReconcileMetrics {
            reconcile_total: registered(
                registry,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default(),
            ),
            reconcile_errors_total: registered(
                registry,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default(),
            ),
            reconcile_time_seconds: registered(
                registry,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Family::new_with_constructor(reconcile_histogram),
            ),
            operations_total: registered(
                registry,
                "gardener_extension_operations",
                "Total number of extension operations per controller, operation and result",
                Family::default(),
            ),
            operation_duration_seconds: registered(
                registry,
                "gardener_extension_operation_duration_seconds",
                "Length of time per extension operation per controller and operation",
                Family::new_with_constructor(operation_histogram),
            ),
        }
    }

    /// Creates the series of `controller` at zero, as controller-runtime does when a controller
    /// starts, so that rates and alerts work before the first reconcile.
    pub fn init_controller(&self, controller: &'static str) {
        // Creating the series is the point; the returned guard is not needed.
        for result in ReconcileResult::ALL {
            let _ = self.reconcile_total.get_or_create(&ReconcileLabels {
                controller,
                result: result.as_str(),
            });
        }
        let labels = ControllerLabels { controller };
        let _ = self.reconcile_errors_total.get_or_create(&labels);
        let _ = self.reconcile_time_seconds.get_or_create(&labels);
    }

    /// Records one call of `controller`'s reconcile function.
    pub fn observe_reconcile(
        &self,
        controller: &'static str,
        result: ReconcileResult,
        duration: Duration,
    ) {
        self.reconcile_total
            .get_or_create(&ReconcileLabels {
                controller,
                result: result.as_str(),
            })
            .inc();
        let labels = ControllerLabels { controller };
        if result == ReconcileResult::Error {
            self.reconcile_errors_total.get_or_create(&labels).inc();
        }
        self.reconcile_time_seconds
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    /// Records one Gardener operation of `controller`.
    pub fn observe(
        &self,
        controller: &'static str,
        operation: Operation,
        result: OperationResult,
        duration: Duration,
    ) {
        self.operations_total
            .get_or_create(&OperationLabels {
                controller,
                operation: operation.as_str(),
                result: result.as_str(),
            })
            .inc();
        self.operation_duration_seconds
            .get_or_create(&OperationDurationLabels {
                controller,
                operation: operation.as_str(),
            })
            .observe(duration.as_secs_f64());
    }
}

/// client-go's `leader_election_master_status`: 1 while this replica holds the Lease.
#[derive(Clone, Debug)]
pub struct LeaderMetrics {
    status: Family<LeaseLabels, Gauge>,
}

impl LeaderMetrics {
    pub fn register(registry: &mut Registry) -> LeaderMetrics {
        LeaderMetrics {
            status: registered(
                registry,
                "leader_election_master_status",
                "Whether this replica is the leader (1) or a stand-by (0) for the named Lease",
                Family::default(),
            ),
        }
    }

    pub fn set(&self, lease: &str, leader: bool) {
        self.status
            .get_or_create(&LeaseLabels {
                name: lease.to_string(),
            })
            .set(i64::from(leader));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use prometheus_client::encoding::text::encode;

    use super::*;

    fn encoded(registry: &Registry) -> String {
        let mut out = String::new();
        match encode(&mut out, registry) {
            Ok(()) => out,
            Err(e) => panic!("encoding failed: {e}"),
        }
    }

    /// The label names and the metric name of every sample line.
    fn samples(text: &str) -> Vec<(String, BTreeSet<String>)> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let name_end = l.find(['{', ' ']).unwrap_or(l.len());
                let name = l[..name_end].to_string();
                let labels = l
                    .find('{')
                    .and_then(|start| l.find('}').map(|end| &l[start + 1..end]))
                    .unwrap_or("")
                    .split(',')
                    .filter(|kv| !kv.is_empty())
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
                    .collect();
                (name, labels)
            })
            .collect()
    }

    #[test]
    fn families_use_controller_runtime_names() {
        let mut registry = Registry::default();
        let metrics = ReconcileMetrics::register(&mut registry);
        metrics.observe_reconcile(
            "extension",
            ReconcileResult::Success,
            Duration::from_millis(30),
        );
        metrics.observe_reconcile(
            "extension",
            ReconcileResult::Error,
            Duration::from_millis(70),
        );
        metrics.observe_reconcile(
            "heartbeat",
            ReconcileResult::RequeueAfter,
            Duration::from_millis(5),
        );
        metrics.observe(
            "extension",
            Operation::ForceDelete,
            OperationResult::Succeeded,
            Duration::from_secs(2),
        );
        let text = encoded(&registry);
        for line in [
            r#"controller_runtime_reconcile_total{controller="extension",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="extension",result="error"} 1"#,
            r#"controller_runtime_reconcile_total{controller="heartbeat",result="requeue_after"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="extension"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="extension"} 2"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="0.05",controller="extension"} 1"#,
            r#"gardener_extension_operations_total{controller="extension",operation="force_delete",result="succeeded"} 1"#,
            r#"gardener_extension_operation_duration_seconds_count{controller="extension",operation="force_delete"} 1"#,
            "# TYPE controller_runtime_reconcile_time_seconds histogram",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("_total_total"), "{text}");
    }

    #[test]
    fn labels_are_bounded() {
        let mut registry = Registry::default();
        let metrics = ReconcileMetrics::register(&mut registry);
        let leader = LeaderMetrics::register(&mut registry);
        metrics.init_controller("extension");
        leader.set("containerd-shim-leader-election", true);
        for operation in [
            Operation::Create,
            Operation::Reconcile,
            Operation::Delete,
            Operation::ForceDelete,
            Operation::Migrate,
            Operation::Restore,
        ] {
            for result in [
                OperationResult::Succeeded,
                OperationResult::Error,
                OperationResult::Skipped,
            ] {
                metrics.observe("extension", operation, result, Duration::from_millis(1));
            }
        }
        for result in ReconcileResult::ALL {
            metrics.observe_reconcile("extension", result, Duration::from_millis(1));
        }
        let text = encoded(&registry);
        let allowed: BTreeSet<String> = ["controller", "result", "operation", "le", "name"]
            .into_iter()
            .map(String::from)
            .collect();
        let samples = samples(&text);
        assert!(!samples.is_empty());
        for (name, labels) in &samples {
            assert!(labels.is_subset(&allowed), "{name} has labels {labels:?}");
            if name != "leader_election_master_status" {
                assert!(
                    !labels.contains("name"),
                    "{name} must not carry object names"
                );
            }
        }
        // 4 reconcile results + 6 operations x 3 results: the series count is fixed by the code,
        // whatever objects are reconciled.
        let totals = samples
            .iter()
            .filter(|(n, _)| n == "controller_runtime_reconcile_total")
            .count();
        assert_eq!(totals, 4);
        let operations = samples
            .iter()
            .filter(|(n, _)| n == "gardener_extension_operations_total")
            .count();
        assert_eq!(operations, 18);
        assert!(
            text.contains(
                r#"leader_election_master_status{name="containerd-shim-leader-election"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn init_controller_creates_zero_series() {
        let mut registry = Registry::default();
        let metrics = ReconcileMetrics::register(&mut registry);
        metrics.init_controller("heartbeat");
        let text = encoded(&registry);
        assert!(
            text.contains(
                r#"controller_runtime_reconcile_total{controller="heartbeat",result="success"} 0"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"controller_runtime_reconcile_errors_total{controller="heartbeat"} 0"#),
            "{text}"
        );
    }
}
