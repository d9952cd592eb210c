//! Health checks give way to a backlog of lifecycle work.
//!
//! When a controller takes over a seed, or gardenlet asks for many Extensions at once, the
//! lifecycle controller has more Extensions to reconcile than it works on at a time, and the
//! seed API server is the bottleneck: gardenlet waits for each of those Extensions with a
//! timeout (three minutes by default), while shoot care only reads the health conditions when
//! it next looks. A check during that backlog reads the shoot-access secret and writes
//! conditions that are about to change again; each of those requests delays a reconcile
//! gardenlet is waiting for. So while the backlog lasts, checks wait, without a request, and
//! every Extension is checked at most [`MAX_YIELD`] late.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use super::config::HealthCheckConfig;
use super::reconcile::operation_in_flight;
use crate::gardener::api::{Extension, OPERATION_ANNOTATION, operation};

/// The longest a check waits for a backlog: gardenlet's default wait for an Extension, so a
/// health report is never later than the lifecycle results gardenlet waits for anyway.
pub(crate) const MAX_YIELD: Duration = Duration::from_secs(3 * 60);
/// How soon a check that gave way looks again.
pub(crate) const YIELD_RECHECK: Duration = Duration::from_secs(5);
/// How long a count of the backlog is used before the Extensions are counted again.
const RECOUNT_AFTER: Duration = Duration::from_secs(1);

/// Whether the lifecycle controller has work to do on `extension`: gardenlet asked for an
/// operation that has not been started, the spec changed since the last one, or an operation
/// is running (see [`operation_in_flight`]).
pub(crate) fn lifecycle_pending(
    extension: &Extension,
    now: jiff::Timestamp,
    period: Duration,
) -> bool {
    if extension.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let requested = extension
        .annotations()
        .get(OPERATION_ANNOTATION)
        .is_some_and(|op| op == operation::RECONCILE || op == operation::RESTORE);
    let observed = extension
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    let spec_changed =
        extension.metadata.generation.is_some() && observed < extension.metadata.generation;
    requested || spec_changed || operation_in_flight(extension, now, period)
}

/// What a check that is due does about the backlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// No backlog (or none this controller gives way to): check.
    Check,
    /// Check: it has waited [`MAX_YIELD`] already.
    CheckAfterWaiting,
    /// Wait for the backlog, [`YIELD_RECHECK`] at a time.
    Wait,
}

/// Whether a check gives way: when more Extensions than `limit` (the lifecycle controller's
/// concurrency: more means a queue) have lifecycle work pending, and it has waited less than
/// [`MAX_YIELD`] since `waiting_since`.
pub(crate) fn turn(
    pending: usize,
    limit: Option<usize>,
    waiting_since: Option<Instant>,
    now: Instant,
) -> Turn {
    match limit {
        Some(limit) if pending > limit => match waiting_since {
            Some(since) if now.saturating_duration_since(since) >= MAX_YIELD => {
                Turn::CheckAfterWaiting
            }
            _ => Turn::Wait,
        },
        _ => Turn::Check,
    }
}

/// Counts the Extensions with lifecycle work pending, from the shared cache, at most once per
/// [`RECOUNT_AFTER`].
pub(crate) struct Backlog {
    store: Store<Extension>,
    last: Mutex<Option<(Instant, usize)>>,
}

impl Backlog {
    pub(crate) fn new(store: Store<Extension>) -> Backlog {
        Backlog {
            store,
            last: Mutex::new(None),
        }
    }

    fn last(&self) -> MutexGuard<'_, Option<(Instant, usize)>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many of the Extensions `config` handles have lifecycle work pending.
    pub(crate) fn pending(&self, config: &HealthCheckConfig, now: Instant) -> usize {
        let mut last = self.last();
        if let Some((at, count)) = *last
            && now.saturating_duration_since(at) < RECOUNT_AFTER
        {
            return count;
        }
        let wall = jiff::Timestamp::now();
        let count = self
            .store
            .state()
            .iter()
            .filter(|e| config.handles(e) && lifecycle_pending(e, wall, config.period))
            .count();
        *last = Some((now, count));
        count
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::gardener::api::extension::test_extension;
    use crate::gardener::api::{ExtensionStatus, LastOperation, OperationState, OperationType};

    const PERIOD: Duration = Duration::from_secs(30);

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn done(generation: i64, observed: i64) -> Extension {
        let mut e = test_extension("shoot--p--s", "containerd-shim", "containerd-shim", None);
        e.metadata.generation = Some(generation);
        e.status = Some(ExtensionStatus {
            last_operation: Some(LastOperation {
                description: "d".into(),
                last_update_time: Time(at(0)),
                progress: 100,
                state: OperationState::Succeeded,
                type_: OperationType::Reconcile,
            }),
            observed_generation: Some(observed),
            ..ExtensionStatus::default()
        });
        e
    }

    #[test]
    fn lifecycle_work_is_a_request_a_new_spec_or_a_running_operation() {
        let now = at(100);
        assert!(!lifecycle_pending(&done(2, 2), now, PERIOD), "settled");
        assert!(lifecycle_pending(&done(3, 2), now, PERIOD), "new spec");

        let mut requested = done(2, 2);
        requested
            .annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
        assert!(lifecycle_pending(&requested, now, PERIOD));

        let mut running = done(2, 2);
        if let Some(op) = running
            .status
            .as_mut()
            .and_then(|s| s.last_operation.as_mut())
        {
            op.state = OperationState::Processing;
            op.last_update_time = Time(at(90));
        }
        assert!(lifecycle_pending(&running, now, PERIOD));

        let mut new = test_extension("shoot--p--s", "containerd-shim", "containerd-shim", None);
        new.annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
        assert!(lifecycle_pending(&new, now, PERIOD), "never reconciled");

        let mut deleting = done(3, 2);
        deleting.metadata.deletion_timestamp = Some(Time(at(50)));
        assert!(!lifecycle_pending(&deleting, now, PERIOD), "deletion");
    }

    #[test]
    fn a_check_waits_only_for_a_queue_and_only_so_long() {
        let now = Instant::now();
        assert_eq!(turn(100, None, None, now), Turn::Check, "never gives way");
        assert_eq!(turn(5, Some(5), None, now), Turn::Check, "no queue");
        assert_eq!(turn(6, Some(5), None, now), Turn::Wait);
        let recently = now.checked_sub(Duration::from_secs(60)).unwrap_or(now);
        assert_eq!(turn(6, Some(5), Some(recently), now), Turn::Wait);
        if let Some(long_ago) = now.checked_sub(MAX_YIELD) {
            assert_eq!(
                turn(6, Some(5), Some(long_ago), now),
                Turn::CheckAfterWaiting
            );
        }
    }
}
