//! One health check of one Extension: decide whether to check at all, run the checks, and
//! write the conditions if (and only if) they changed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use super::backlog::{Turn, YIELD_RECHECK, turn};
use super::bookkeeping::{Bookkeeping, PendingWrite};
use super::check::{CheckContext, HealthCheck};
use super::condition::{build_condition, find, merge_conditions, now_in_seconds};
use super::config::HealthCheckConfig;
use super::error::HealthCheckError;
use super::result::{Aggregate, CheckResult, aggregate};
use super::verdict::{condition_update, hibernated_update};
use crate::gardener::api::extension::DEFAULT_CLASS;
use crate::gardener::api::{Condition, Extension, OPERATION_ANNOTATION, OperationType, operation};
use crate::gardener::cache::SharedCaches;
use crate::gardener::extension::backlog::{operation_requested, processing_within};

/// What every reconcile shares.
pub(crate) struct Context {
    pub client: Client,
    pub caches: SharedCaches,
    pub config: Arc<HealthCheckConfig>,
    pub bookkeeping: Arc<Bookkeeping>,
    /// Becomes `true` on shutdown: running reconciles stop at once, so a replica that lost its
    /// leadership does not keep writing.
    pub stop: watch::Receiver<bool>,
}

/// Why an Extension is not checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// It is being deleted: its conditions no longer matter.
    Deleting,
    /// It is being migrated to another seed: the health of what it manages is not ours to
    /// report any more.
    Migrating,
}

/// Whether (and why) the Extension must not be checked. Such an Extension is not requeued:
/// only a new generation, a ManagedResource or a Cluster change checks it again.
pub(crate) fn skip_reason(extension: &Extension) -> Option<Skip> {
    if extension.metadata.deletion_timestamp.is_some() {
        return Some(Skip::Deleting);
    }
    let migrate_annotation = extension
        .annotations()
        .get(OPERATION_ANNOTATION)
        .map(String::as_str)
        == Some(operation::MIGRATE);
    let migrate_operation = extension
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|op| op.type_ == OperationType::Migrate);
    (migrate_annotation || migrate_operation).then_some(Skip::Migrating)
}

/// Whether the lifecycle reconciler is in the middle of an operation on the Extension: it has
/// never operated on it and gardenlet's request is pending, or it wrote `Processing` less than
/// `period` ago. Its bundle is being written, so a check now would report a state that is about
/// to change (at first sight of a new Extension: its ManagedResource is missing). Such an
/// Extension is checked again shortly, without a request.
pub(crate) fn operation_in_flight(
    extension: &Extension,
    now: jiff::Timestamp,
    period: Duration,
) -> bool {
    let operated = extension
        .status
        .as_ref()
        .is_some_and(|s| s.last_operation.is_some());
    if operated {
        processing_within(extension, now, period)
    } else {
        operation_requested(extension)
    }
}

/// How soon an Extension whose operation is in flight is looked at again.
const IN_FLIGHT_RECHECK: Duration = Duration::from_secs(2);

/// What the checks found, before it is merged into an Extension's conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Findings {
    /// The shoot is hibernated; nothing was checked.
    Hibernated,
    /// The aggregated checks, per condition type in registration order.
    Checked(Vec<(String, Aggregate)>),
}

/// The Extension's conditions after merging `findings` into `current` at time `now`.
pub(crate) fn desired_conditions<'a>(
    current: &[Condition],
    findings: &Findings,
    condition_types: impl Iterator<Item = &'a str>,
    now: jiff::Timestamp,
) -> Vec<Condition> {
    let updates: Vec<_> = match findings {
        Findings::Hibernated => condition_types.map(hibernated_update).collect(),
        Findings::Checked(aggregates) => aggregates
            .iter()
            .map(|(condition_type, agg)| {
                condition_update(condition_type, agg, find(current, condition_type), now)
            })
            .collect(),
    };
    let built = updates.into_iter().map(|update| {
        let old = find(current, &update.condition_type);
        build_condition(old, update, now)
    });
    merge_conditions(current, built)
}

/// The merge patch of `status.conditions`. It carries the resourceVersion the conditions were
/// computed from, so the API server refuses it (409) if anything changed the Extension since:
/// `conditions` is a list, replaced as a whole, and must not drop a concurrent change.
pub(crate) fn conditions_patch(
    resource_version: &str,
    conditions: &[Condition],
) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": conditions},
    })
}

fn conditions_of(extension: &Extension) -> &[Condition] {
    extension
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// The conditions a check compares with, and the resourceVersion its write carries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Base {
    pub version: Option<String>,
    pub conditions: Vec<Condition>,
}

/// What the Extension's conditions are, as far as this controller knows without asking: the
/// cached object, unless the cache has not yet shown our own last write (then what we wrote,
/// with the version our write produced). A pending write older than `grace` is taken to have
/// been shown (a relist can skip versions); if the cache is older after all, the write carrying
/// its version is refused with a conflict and the Extension is read.
pub(crate) fn base(
    cached: &Extension,
    pending: Option<&PendingWrite>,
    now: Instant,
    grace: Duration,
) -> Base {
    let cached_version = cached.metadata.resource_version.as_deref();
    match pending {
        Some(p)
            if Some(p.version.as_str()) != cached_version
                && now.saturating_duration_since(p.at) < grace =>
        {
            Base {
                version: Some(p.version.clone()),
                conditions: p.conditions.clone(),
            }
        }
        _ => Base {
            version: cached_version.map(String::from),
            conditions: conditions_of(cached).to_vec(),
        },
    }
}

/// Checks one Extension; the entry point for the applier.
pub(crate) async fn reconcile(
    extension: Arc<Extension>,
    ctx: Arc<Context>,
) -> Result<Action, HealthCheckError> {
    let key = ObjectRef::from_obj(extension.as_ref());
    let timeout = ctx.config.period.saturating_mul(2);
    let namespace = extension.namespace().unwrap_or_default();
    let name = extension.name_any();
    let mut stop = ctx.stop.clone();
    let outcome = tokio::select! {
        // A closed channel means the controller is gone: stop as well.
        _ = stop.wait_for(|stopped| *stopped) => return Ok(Action::await_change()),
        outcome = tokio::time::timeout(timeout, check_and_write(extension, &ctx)) => outcome,
    };
    match outcome {
        Ok(Ok(action)) => {
            ctx.bookkeeping.clear_failures(&key);
            Ok(action)
        }
        Ok(Err(e)) => Err(e),
        Err(_elapsed) => Err(HealthCheckError::Timeout {
            namespace,
            name,
            timeout,
        }),
    }
}

async fn check_and_write(
    cached: Arc<Extension>,
    ctx: &Context,
) -> Result<Action, HealthCheckError> {
    let namespace = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    if let Some(skip) = skip_reason(&cached) {
        tracing::debug!(%namespace, %name, ?skip, "not checking the Extension");
        ctx.config.release(&namespace);
        return Ok(Action::await_change());
    }

    if operation_in_flight(&cached, jiff::Timestamp::now(), ctx.config.period) {
        tracing::debug!(%namespace, %name, "the Extension's operation is in flight; checking later");
        return Ok(Action::requeue(IN_FLIGHT_RECHECK));
    }

    let key = ObjectRef::from_obj(cached.as_ref());
    let now = Instant::now();
    let busy = ctx
        .config
        .lifecycle_backlog
        .as_ref()
        .is_some_and(|backlog| backlog.busy(now));
    match turn(busy, ctx.bookkeeping.waiting_since(&key), now) {
        Turn::Wait => {
            tracing::debug!(%namespace, %name, "giving way to the lifecycle backlog");
            ctx.bookkeeping.start_waiting(&key, now);
            return Ok(Action::requeue(YIELD_RECHECK));
        }
        // Checked as usual from now on, for as long as the backlog lasts.
        Turn::CheckAfterWaiting => {}
        Turn::Check => ctx.bookkeeping.stop_waiting(&key),
    }

    let findings = find_health(&cached, ctx).await?;
    write_conditions(cached, &findings, ctx).await?;
    Ok(match findings {
        // The Cluster watch resumes the checks when the shoot wakes up.
        Findings::Hibernated => {
            ctx.config.release(&namespace);
            Action::await_change()
        }
        Findings::Checked(_) => Action::requeue(ctx.config.period),
    })
}

async fn find_health(
    extension: &Arc<Extension>,
    ctx: &Context,
) -> Result<Findings, HealthCheckError> {
    let namespace = extension.namespace().unwrap_or_default();
    let (cluster, shoot) = if extension.class_or_default() == DEFAULT_CLASS {
        let cluster =
            ctx.caches
                .cluster(&namespace)
                .ok_or_else(|| HealthCheckError::ClusterNotFound {
                    namespace: namespace.clone(),
                    name: extension.name_any(),
                })?;
        let shoot = cluster.shoot()?.map(Arc::new);
        if shoot.as_ref().is_some_and(|s| s.hibernation_enabled()) {
            return Ok(Findings::Hibernated);
        }
        (Some(cluster), shoot)
    } else {
        (None, None)
    };
    let check_ctx = Arc::new(CheckContext {
        extension: extension.clone(),
        cluster,
        shoot,
        caches: ctx.caches.clone(),
        client: ctx.client.clone(),
    });
    Ok(Findings::Checked(run_checks(&ctx.config, check_ctx).await))
}

/// Runs every check of every registration in parallel and aggregates per condition type.
async fn run_checks(
    config: &HealthCheckConfig,
    ctx: Arc<CheckContext>,
) -> Vec<(String, Aggregate)> {
    let per_type = config.registrations.iter().map(|registration| {
        let runs = registration
            .checks
            .iter()
            .map(|check| run_check(check.clone(), ctx.clone(), config.period));
        async move {
            let results = join_all(runs).await;
            (registration.condition_type.clone(), aggregate(&results))
        }
    });
    join_all(per_type).await
}

/// Aborts the task when dropped, so a cancelled reconcile does not leave checks running.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one check in its own task, so that a check that panics or hangs costs only its own
/// result.
async fn run_check(
    check: Arc<dyn HealthCheck>,
    ctx: Arc<CheckContext>,
    timeout: Duration,
) -> CheckResult {
    let name = check.name().into_owned();
    let mut task = tokio::spawn(async move { check.check(&ctx).await });
    let _abort = AbortOnDrop(task.abort_handle());
    match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(result)) => result,
        Ok(Err(join_error)) if join_error.is_panic() => {
            CheckResult::failed(format!("health check {name} panicked"))
        }
        Ok(Err(_cancelled)) => CheckResult::failed(format!("health check {name} was cancelled")),
        Err(_elapsed) => CheckResult::failed(format!(
            "health check {name} did not finish within {timeout:?}"
        )),
    }
}

/// How often a refused condition write reads the Extension and tries again before the check
/// fails and is retried later.
const WRITE_ATTEMPTS: usize = 3;

/// Writes the conditions `findings` imply, unless they equal the current ones (see [`base`]):
/// a check that finds what was last written sends nothing. A concurrent change of the
/// Extension makes the write fail with a conflict; the Extension is then read and the write
/// tried again at once. Waiting for the cache instead loses every round against a writer that
/// writes continuously: by the time the cache shows one change, the next has been made.
async fn write_conditions(
    extension: Arc<Extension>,
    findings: &Findings,
    ctx: &Context,
) -> Result<(), HealthCheckError> {
    let key = ObjectRef::from_obj(extension.as_ref());
    let namespace = extension.namespace().unwrap_or_default();
    let name = extension.name_any();
    let mut current = base(
        &extension,
        ctx.bookkeeping.pending(&key).as_ref(),
        Instant::now(),
        ctx.config.period,
    );
    let conflict = || HealthCheckError::Conflict {
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let write_error = |source| HealthCheckError::Write {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    };
    let api: Api<Extension> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams {
        field_manager: Some(ctx.config.field_manager.clone()),
        ..PatchParams::default()
    };
    for _ in 0..WRITE_ATTEMPTS {
        let desired = desired_conditions(
            &current.conditions,
            findings,
            ctx.config.condition_types(),
            now_in_seconds(),
        );
        if desired == current.conditions {
            return Ok(());
        }
        // Every object the API server returns has one; never write without the lock.
        let Some(version) = &current.version else {
            return Err(conflict());
        };
        let patch = conditions_patch(version, &desired);
        match api
            .patch_status(&name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                tracing::info!(%namespace, %name, conditions = %summary(&desired), "wrote health conditions");
                remember_write(ctx, &key, written.resource_version(), desired);
                return Ok(());
            }
            Err(e) if status_code(&e) == Some(409) => {
                ctx.bookkeeping.set_pending(&key, None);
                match api.get_opt(&name).await {
                    Ok(Some(fresh)) => {
                        current = Base {
                            version: fresh.metadata.resource_version.clone(),
                            conditions: conditions_of(&fresh).to_vec(),
                        };
                    }
                    Ok(None) => return Ok(()),
                    Err(source) => return Err(write_error(source)),
                }
            }
            // Deleted meanwhile: nothing left to report on.
            Err(e) if status_code(&e) == Some(404) => return Ok(()),
            Err(source) => return Err(write_error(source)),
        }
    }
    Err(conflict())
}

/// Remembers our write until the cache shows it, unless it already does.
fn remember_write(
    ctx: &Context,
    key: &ObjectRef<Extension>,
    version: Option<String>,
    conditions: Vec<Condition>,
) {
    let Some(version) = version else {
        ctx.bookkeeping.set_pending(key, None);
        return;
    };
    let shown = ctx
        .caches
        .extensions
        .store()
        .get(key)
        .is_some_and(|cached| cached.metadata.resource_version.as_deref() == Some(&version));
    let pending = (!shown).then(|| PendingWrite {
        version,
        conditions,
        at: Instant::now(),
    });
    ctx.bookkeeping.set_pending(key, pending);
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// `Type=Status` pairs, for logs.
fn summary(conditions: &[Condition]) -> String {
    conditions
        .iter()
        .map(|c| format!("{}={:?}", c.type_, c.status))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::gardener::api::extension::test_extension;
    use crate::gardener::api::{
        ConditionStatus, ErrorCode, ExtensionStatus, LastOperation, OperationState,
    };
    use crate::gardener::healthcheck::condition::ConditionUpdate;
    use crate::gardener::healthcheck::verdict::{
        MESSAGE_HIBERNATED, MESSAGE_SUCCESSFUL, REASON_SUCCESSFUL,
    };

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn extension() -> Extension {
        test_extension("shoot--p--s", "containerd-shim", "containerd-shim", None)
    }

    fn last_operation(type_: OperationType, state: OperationState) -> LastOperation {
        LastOperation {
            description: "d".into(),
            last_update_time: Time(at(0)),
            progress: 100,
            state,
            type_,
        }
    }

    fn condition(type_: &str, status: ConditionStatus, message: &str, second: i64) -> Condition {
        build_condition(
            None,
            ConditionUpdate {
                condition_type: type_.into(),
                status,
                reason: REASON_SUCCESSFUL.into(),
                message: message.into(),
                codes: vec![],
            },
            at(second),
        )
    }

    #[test]
    fn t8e_deleting_and_migrating_extensions_are_skipped() {
        assert_eq!(skip_reason(&extension()), None);

        let mut deleting = extension();
        deleting.metadata.deletion_timestamp = Some(Time(at(0)));
        assert_eq!(skip_reason(&deleting), Some(Skip::Deleting));

        let mut annotated = extension();
        annotated
            .annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "migrate".into());
        assert_eq!(skip_reason(&annotated), Some(Skip::Migrating));

        for state in [
            OperationState::Processing,
            OperationState::Succeeded,
            OperationState::Error,
        ] {
            let mut migrated = extension();
            migrated.status = Some(ExtensionStatus {
                last_operation: Some(last_operation(OperationType::Migrate, state)),
                ..ExtensionStatus::default()
            });
            assert_eq!(skip_reason(&migrated), Some(Skip::Migrating), "{state:?}");
        }

        let mut other = extension();
        other
            .annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
        other.status = Some(ExtensionStatus {
            last_operation: Some(last_operation(
                OperationType::Restore,
                OperationState::Succeeded,
            )),
            ..ExtensionStatus::default()
        });
        assert_eq!(skip_reason(&other), None);
    }

    #[test]
    fn an_operation_in_flight_postpones_the_check() {
        let period = Duration::from_secs(30);
        let now = at(100);
        let fresh = extension();
        assert!(
            !operation_in_flight(&fresh, now, period),
            "nothing requested"
        );
        let mut requested = extension();
        requested
            .annotations_mut()
            .insert(OPERATION_ANNOTATION.into(), "reconcile".into());
        assert!(operation_in_flight(&requested, now, period));

        let with = |state, second| {
            let mut e = requested.clone();
            e.status = Some(ExtensionStatus {
                last_operation: Some(LastOperation {
                    last_update_time: Time(at(second)),
                    ..last_operation(OperationType::Reconcile, state)
                }),
                ..ExtensionStatus::default()
            });
            e
        };
        assert!(operation_in_flight(
            &with(OperationState::Processing, 90),
            now,
            period
        ));
        assert!(
            !operation_in_flight(&with(OperationState::Processing, 60), now, period),
            "Processing for longer than a period: checked anyway"
        );
        assert!(!operation_in_flight(
            &with(OperationState::Succeeded, 99),
            now,
            period
        ));
        assert!(!operation_in_flight(
            &with(OperationState::Error, 99),
            now,
            period
        ));
    }

    #[test]
    fn hibernation_sets_every_registered_type_and_keeps_foreign_conditions() {
        let current = vec![
            condition("Foreign", ConditionStatus::False, "theirs", 0),
            condition(
                "SystemComponentsHealthy",
                ConditionStatus::False,
                "broken",
                0,
            ),
        ];
        let desired = desired_conditions(
            &current,
            &Findings::Hibernated,
            ["SystemComponentsHealthy", "ControlPlaneHealthy"].into_iter(),
            at(10),
        );
        assert_eq!(desired.len(), 3);
        assert_eq!(desired[0], current[0]);
        for c in &desired[1..] {
            assert_eq!(
                (c.status, c.reason.as_str(), c.message.as_str()),
                (ConditionStatus::True, REASON_SUCCESSFUL, MESSAGE_HIBERNATED)
            );
        }
        assert_eq!(desired[1].last_transition_time.0, at(10));
        assert_eq!(desired[2].last_transition_time.0, at(10));
    }

    #[test]
    fn a_steady_state_yields_the_current_conditions_unchanged() {
        let findings = Findings::Checked(vec![(
            "SystemComponentsHealthy".into(),
            aggregate(&[CheckResult::Successful]),
        )]);
        let first = desired_conditions(&[], &findings, std::iter::empty(), at(0));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].message, MESSAGE_SUCCESSFUL);
        let later = desired_conditions(&first, &findings, std::iter::empty(), at(3600));
        assert_eq!(later, first);
    }

    #[test]
    fn checked_conditions_use_their_old_condition() {
        let current = vec![condition(
            "SystemComponentsHealthy",
            ConditionStatus::True,
            MESSAGE_SUCCESSFUL,
            0,
        )];
        let findings = Findings::Checked(vec![(
            "SystemComponentsHealthy".into(),
            aggregate(&[CheckResult::unsuccessful("x is invalid")
                .with_codes([ErrorCode::ConfigurationProblem])]),
        )]);
        let desired = desired_conditions(&current, &findings, std::iter::empty(), at(60));
        assert_eq!(desired.len(), 1);
        assert_eq!(desired[0].status, ConditionStatus::False);
        assert_eq!(desired[0].last_transition_time.0, at(60));
        assert_eq!(desired[0].codes, [ErrorCode::ConfigurationProblem]);
    }

    #[test]
    fn the_patch_holds_only_the_lock_and_the_conditions() {
        let conditions = vec![condition(
            "SystemComponentsHealthy",
            ConditionStatus::True,
            "ok",
            0,
        )];
        let patch = conditions_patch("42", &conditions);
        assert_eq!(
            patch,
            serde_json::json!({
                "metadata": {"resourceVersion": "42"},
                "status": {"conditions": [{
                    "type": "SystemComponentsHealthy",
                    "status": "True",
                    "lastTransitionTime": "2027-01-15T08:00:00Z",
                    "lastUpdateTime": "2027-01-15T08:00:00Z",
                    "reason": "HealthCheckSuccessful",
                    "message": "ok",
                }]},
            })
        );
    }

    #[test]
    fn our_pending_write_stands_in_for_a_cache_that_has_not_shown_it() {
        let ok = condition("SystemComponentsHealthy", ConditionStatus::True, "ok", 0);
        let mut cached = extension();
        cached.metadata.resource_version = Some("5".into());
        let written = PendingWrite {
            version: "6".into(),
            conditions: vec![ok.clone()],
            at: Instant::now(),
        };
        let grace = Duration::from_secs(30);
        let now = written.at;
        assert_eq!(
            base(&cached, Some(&written), now, grace),
            Base {
                version: Some("6".into()),
                conditions: vec![ok.clone()]
            }
        );
        // The cache shows our write (or the grace is over): the cache is the truth.
        let from_cache = Base {
            version: Some("5".into()),
            conditions: vec![],
        };
        assert_eq!(
            base(&cached, Some(&written), now + grace, grace),
            from_cache
        );
        assert_eq!(base(&cached, None, now, grace), from_cache);
        cached.metadata.resource_version = Some("6".into());
        assert_eq!(
            base(&cached, Some(&written), now, grace).version.as_deref(),
            Some("6")
        );
    }

    struct Sleepy;
    impl HealthCheck for Sleepy {
        fn check<'a>(&'a self, _: &'a CheckContext) -> futures::future::BoxFuture<'a, CheckResult> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                CheckResult::Successful
            })
        }
    }

    struct Panicky;
    impl HealthCheck for Panicky {
        fn name(&self) -> std::borrow::Cow<'_, str> {
            "panicky".into()
        }
        fn check<'a>(&'a self, _: &'a CheckContext) -> futures::future::BoxFuture<'a, CheckResult> {
            Box::pin(async { panic!("a bug in a check") })
        }
    }

    fn check_context() -> Arc<CheckContext> {
        // A client that is never used: the test checks do not call the API. Building it needs
        // only a URL; the caches are never started.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let caches = SharedCaches::spawn(&client, "test");
        Arc::new(CheckContext {
            extension: Arc::new(extension()),
            cluster: None,
            shoot: None,
            caches,
            client,
        })
    }

    #[tokio::test]
    async fn a_hanging_check_times_out_and_a_panicking_one_fails_alone() {
        let ctx = check_context();
        let slow = run_check(Arc::new(Sleepy), ctx.clone(), Duration::from_millis(50)).await;
        assert!(
            matches!(&slow, CheckResult::Failed { detail } if detail.contains("did not finish within 50ms")),
            "{slow:?}"
        );
        let bad = run_check(Arc::new(Panicky), ctx, Duration::from_secs(30)).await;
        assert_eq!(bad, CheckResult::failed("health check panicky panicked"));
    }
}
