//! The lifecycle controller's backlog, as the Extension cache shows it: how many Extensions
//! wait for a reconcile or are in one.
//!
//! When a controller takes over a seed, or gardenlet asks for many Extensions at once, there
//! are more Extensions to reconcile than the controller works on at a time, and the seed API
//! server is the bottleneck. gardenlet waits for each of them with a timeout (three minutes by
//! default); nobody waits for a health report or an Event in the same way. So work that only
//! reports (the health checks, the outcome Events) gives way while a backlog lasts, each piece
//! for at most [`MAX_YIELD`]: every request it would have sent in the wave delays a reconcile
//! gardenlet waits for.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::gardener::api::{Extension, OPERATION_ANNOTATION, OperationState, operation};

/// The longest anything gives way to a backlog: gardenlet's default wait for an Extension, so a
/// report is never later than the lifecycle results gardenlet waits for anyway.
pub const MAX_YIELD: Duration = Duration::from_secs(3 * 60);
/// How long a count is used before the Extensions are counted again.
const RECOUNT_AFTER: Duration = Duration::from_secs(1);

/// Whether gardenlet's `reconcile` or `restore` request is on the Extension, not yet taken.
pub fn operation_requested(extension: &Extension) -> bool {
    extension
        .annotations()
        .get(OPERATION_ANNOTATION)
        .is_some_and(|op| op == operation::RECONCILE || op == operation::RESTORE)
}

/// Whether the last operation is `Processing`, written less than `running_for` before `now`:
/// an operation that has not written for longer is nobody's work any more.
pub fn processing_within(
    extension: &Extension,
    now: jiff::Timestamp,
    running_for: Duration,
) -> bool {
    extension
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|op| {
            op.state == OperationState::Processing
                && jiff::SignedDuration::try_from(running_for).is_ok_and(|span| {
                    now < op.last_update_time.0.saturating_add(span).unwrap_or(now)
                })
        })
}

/// Whether the lifecycle controller has work to do on `extension`: gardenlet asked for an
/// operation that has not been taken, the spec changed since the last one was observed, or
/// `Processing` was written less than `running_for` ago.
pub fn lifecycle_pending(
    extension: &Extension,
    now: jiff::Timestamp,
    running_for: Duration,
) -> bool {
    if extension.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let observed = extension
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    let spec_changed =
        extension.metadata.generation.is_some() && observed < extension.metadata.generation;
    operation_requested(extension) || spec_changed || processing_within(extension, now, running_for)
}

/// Counts the Extensions of a cache with lifecycle work pending, at most once a second.
pub struct Backlog {
    store: Store<Extension>,
    concurrency: usize,
    running_for: Duration,
    last: Mutex<Option<(Instant, usize)>>,
}

impl Backlog {
    /// The backlog of a lifecycle controller that reconciles `concurrency` Extensions at a time,
    /// from the cache behind `store` (the Extensions it handles). An operation counts as running
    /// for `running_for` after its `Processing` write.
    pub fn new(store: Store<Extension>, concurrency: usize, running_for: Duration) -> Backlog {
        Backlog {
            store,
            concurrency,
            running_for,
            last: Mutex::new(None),
        }
    }

    fn last(&self) -> MutexGuard<'_, Option<(Instant, usize)>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many Extensions have lifecycle work pending.
    pub fn pending(&self, now: Instant) -> usize {
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
            .filter(|e| lifecycle_pending(e, wall, self.running_for))
            .count();
        *last = Some((now, count));
        count
    }

    /// Whether more Extensions have work pending than the controller works on at once: a queue.
    pub fn busy(&self, now: Instant) -> bool {
        self.pending(now) > self.concurrency
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::gardener::api::extension::test_extension;
    use crate::gardener::api::{ExtensionStatus, LastOperation, OperationType};

    const RUNNING_FOR: Duration = Duration::from_secs(30);

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
        assert!(!lifecycle_pending(&done(2, 2), now, RUNNING_FOR), "settled");
        assert!(lifecycle_pending(&done(3, 2), now, RUNNING_FOR), "new spec");

        let mut requested = done(2, 2);
        requested
            .annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
        assert!(lifecycle_pending(&requested, now, RUNNING_FOR));

        let processing_since = |second| {
            let mut e = done(2, 2);
            if let Some(op) = e.status.as_mut().and_then(|s| s.last_operation.as_mut()) {
                op.state = OperationState::Processing;
                op.last_update_time = Time(at(second));
            }
            e
        };
        assert!(lifecycle_pending(&processing_since(90), now, RUNNING_FOR));
        assert!(
            !lifecycle_pending(&processing_since(60), now, RUNNING_FOR),
            "a Processing older than running_for is nobody's work any more"
        );

        let mut new = test_extension("shoot--p--s", "containerd-shim", "containerd-shim", None);
        new.annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
        assert!(
            lifecycle_pending(&new, now, RUNNING_FOR),
            "never reconciled"
        );

        let mut deleting = done(3, 2);
        deleting.metadata.deletion_timestamp = Some(Time(at(50)));
        assert!(!lifecycle_pending(&deleting, now, RUNNING_FOR), "deletion");
    }

    #[test]
    fn a_queue_is_more_pending_than_the_concurrency() {
        let (store, mut writer) = kube::runtime::reflector::store::<Extension>();
        let backlog = Backlog::new(store, 1, RUNNING_FOR);
        let requested = |name: &str| {
            let mut e = done(1, 1);
            e.metadata.name = Some(name.into());
            e.annotations_mut()
                .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
            e
        };
        let now = Instant::now();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(requested("a")));
        assert!(!backlog.busy(now), "one pending, one at a time: no queue");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(requested("b")));
        assert!(!backlog.busy(now), "the count of a moment ago is used");
        assert!(backlog.busy(now + RECOUNT_AFTER), "two pending: a queue");
    }
}
