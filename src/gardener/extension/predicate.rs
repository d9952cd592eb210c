//! Which watch events start a reconcile (gardener-contract.md §1.3–1.4).
//!
//! Retries never pass through here: error backoff and resync requeues go straight to the
//! queue, exactly as controller-runtime's work-queue bypasses predicates.

use crate::gardener::api::{Extension, OperationState, Shoot, TIMESTAMP_ANNOTATION, operation};

use super::operation::operation_annotation;

/// How the reconciler is triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerMode {
    /// Production default: act on gardenlet's operation annotation, deletions and unfinished
    /// operations.
    OperationAnnotation,
    /// `--ignore-operation-annotation`: act on every spec change (generation).
    GenerationChanged,
}

/// `HasType` and `HasClass`: the object is ours at all. An empty class list means `shoot`.
pub fn is_ours(ext: &Extension, extension_type: &str, classes: &[String]) -> bool {
    if ext.spec.type_ != extension_type {
        return false;
    }
    let class = ext.class_or_default();
    if classes.is_empty() || (classes.len() == 1 && classes[0].is_empty()) {
        return class == crate::gardener::api::extension::DEFAULT_CLASS;
    }
    classes.iter().any(|c| c == class)
}

fn has_acting_annotation(ext: &Extension) -> bool {
    matches!(
        operation_annotation(ext),
        Some(operation::RECONCILE | operation::RESTORE | operation::MIGRATE)
    )
}

/// A create event, which includes every object of the initial list at start-up.
pub fn admit_create(ext: &Extension, mode: TriggerMode) -> bool {
    match mode {
        TriggerMode::GenerationChanged => true,
        TriggerMode::OperationAnnotation => {
            has_acting_annotation(ext)
                || ext.metadata.deletion_timestamp.is_some()
                || ext
                    .status
                    .as_ref()
                    .and_then(|s| s.last_operation.as_ref())
                    .is_none_or(|l| l.state != OperationState::Succeeded)
                || unanswered_request(ext)
        }
    }
}

/// Whether gardenlet's last request (its `gardener.cloud/timestamp`) is newer than the last
/// recorded operation, so gardenlet's readiness check cannot pass yet.
///
/// Deliberate addition to Gardener's create filter: the `reconcile` annotation is removed
/// before the Processing status is written (§1.5). A process that dies between the two leaves
/// a Succeeded object without the annotation, which no filter admits any more: gardenlet would
/// wait for its full timeout and retry the whole shoot. Admitting such objects when a
/// controller starts or becomes leader answers the request instead.
fn unanswered_request(ext: &Extension) -> bool {
    let Some(requested) = ext
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TIMESTAMP_ANNOTATION))
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return false;
    };
    let requested = jiff::Timestamp::from_second(requested.as_second()).unwrap_or(requested);
    ext.status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|l| requested > l.last_update_time.0)
}

/// An update event. Status-only changes, finalizer changes and annotation removals never pass,
/// so the reconciler's own writes do not trigger it again.
pub fn admit_update(old: &Extension, new: &Extension, mode: TriggerMode) -> bool {
    match mode {
        TriggerMode::GenerationChanged => {
            // Deliberate difference from Gardener (§1.4 ⚠): a migrate or restore annotation does
            // not change the generation, yet gardenlet waits for it to be processed.
            old.metadata.generation != new.metadata.generation
                || (operation_annotation(old) != operation_annotation(new)
                    && matches!(
                        operation_annotation(new),
                        Some(operation::MIGRATE | operation::RESTORE)
                    ))
        }
        TriggerMode::OperationAnnotation => {
            (has_acting_annotation(new) && !only_status_or_finalizers_changed(old, new))
                || (new.metadata.deletion_timestamp.is_some() && old.status == new.status)
        }
    }
}

/// Whether an update changed nothing but what the controllers write themselves: status
/// (operation and health conditions) and finalizers.
///
/// Deliberate difference from Gardener (§1.4): there, every update of an object that carries
/// `migrate` or `restore` passes, and both annotations stay until the operation succeeds. A
/// failing migrate or restore thus re-triggers itself with its own Error status write and
/// retries in a tight loop (two status writes and the actuator's requests every few
/// milliseconds), bypassing the error backoff. Here it retries with backoff, and gardenlet's
/// own changes (annotations, spec, deletion) still pass at once.
fn only_status_or_finalizers_changed(old: &Extension, new: &Extension) -> bool {
    old.spec == new.spec
        && old.metadata.annotations == new.metadata.annotations
        && old.metadata.labels == new.metadata.labels
        && old.metadata.generation == new.metadata.generation
        && old.metadata.deletion_timestamp == new.metadata.deletion_timestamp
}

/// `ShootNotFailedPredicate` for create and update events. `cluster` is `None` outside shoot
/// namespaces; inside one it is the Cluster lookup: `Err` when the Cluster is missing or its
/// Shoot cannot be decoded, which drops the event like Gardener does.
pub fn shoot_not_failed<E>(cluster: Option<Result<Option<&Shoot>, E>>) -> bool {
    match cluster {
        None => true,
        Some(Err(_)) => false,
        Some(Ok(shoot)) => !shoot.is_some_and(Shoot::is_failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::extension::test_extension;
    use crate::gardener::api::{
        ExtensionStatus, LastOperation, OPERATION_ANNOTATION, OperationType,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ext(type_: &str, class: Option<&str>) -> Extension {
        test_extension("ns", "x", type_, class)
    }

    fn with_state(mut e: Extension, state: Option<OperationState>) -> Extension {
        e.status = Some(ExtensionStatus {
            last_operation: state.map(|state| LastOperation {
                description: "d".into(),
                last_update_time: Time(jiff::Timestamp::UNIX_EPOCH),
                progress: 100,
                state,
                type_: OperationType::Reconcile,
            }),
            ..Default::default()
        });
        e
    }

    /// The last operation of an Extension made by [`with_state`] with a state.
    fn last_operation(e: &mut Extension) -> &mut LastOperation {
        e.status
            .as_mut()
            .and_then(|s| s.last_operation.as_mut())
            .expect("an Extension with a last operation")
    }

    fn annotate(mut e: Extension, key: &str, value: &str) -> Extension {
        e.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        e
    }

    #[test]
    fn type_and_class_filter() {
        let shoot = vec!["shoot".to_string()];
        assert!(is_ours(
            &ext("containerd-shim", None),
            "containerd-shim",
            &[]
        ));
        assert!(is_ours(
            &ext("containerd-shim", None),
            "containerd-shim",
            &shoot
        ));
        assert!(is_ours(
            &ext("containerd-shim", Some("shoot")),
            "containerd-shim",
            &[String::new()]
        ));
        assert!(!is_ours(
            &ext("containerd-shim", Some("seed")),
            "containerd-shim",
            &shoot
        ));
        assert!(!is_ours(&ext("other", None), "containerd-shim", &shoot));
        let both = vec!["seed".to_string(), "shoot".to_string()];
        assert!(is_ours(
            &ext("containerd-shim", Some("seed")),
            "containerd-shim",
            &both
        ));
    }

    #[test]
    fn create_admits_unfinished_and_annotated_objects_only() {
        let m = TriggerMode::OperationAnnotation;
        let base = ext("t", None);
        assert!(admit_create(&with_state(base.clone(), None), m));
        assert!(admit_create(
            &with_state(base.clone(), Some(OperationState::Processing)),
            m
        ));
        assert!(admit_create(
            &with_state(base.clone(), Some(OperationState::Error)),
            m
        ));
        let done = with_state(base.clone(), Some(OperationState::Succeeded));
        assert!(!admit_create(&done, m));
        assert!(admit_create(
            &annotate(done.clone(), OPERATION_ANNOTATION, "reconcile"),
            m
        ));
        assert!(!admit_create(
            &annotate(done.clone(), OPERATION_ANNOTATION, "wait-for-state"),
            m
        ));
        assert!(admit_create(&done, TriggerMode::GenerationChanged));
    }

    #[test]
    fn create_admits_a_request_no_operation_has_answered() {
        let m = TriggerMode::OperationAnnotation;
        // Succeeded at the epoch; gardenlet asked later and the annotation is gone already
        // (a process died between removing it and writing Processing).
        let done = with_state(
            ext("containerd-shim", None),
            Some(OperationState::Succeeded),
        );
        let asked = annotate(done.clone(), TIMESTAMP_ANNOTATION, "2026-01-01T00:00:00.5Z");
        assert!(admit_create(&asked, m));
        // Answered: the operation is at least as new as the request's second.
        let mut answered = asked.clone();
        last_operation(&mut answered).last_update_time =
            Time("2026-01-01T00:00:00Z".parse().unwrap());
        assert!(!admit_create(&answered, m));
        // No timestamp or an unreadable one: Gardener's filter alone.
        assert!(!admit_create(&done, m));
        assert!(!admit_create(
            &annotate(done, TIMESTAMP_ANNOTATION, "yesterday"),
            m
        ));
        // Updates stay Gardener's: the reconciler's own status writes must not re-trigger it.
        assert!(!admit_update(&asked, &asked, m));
    }

    #[test]
    fn updates_ignore_status_finalizer_and_annotation_removal() {
        let m = TriggerMode::OperationAnnotation;
        let old = with_state(ext("t", None), Some(OperationState::Succeeded));
        let mut status_only = old.clone();
        last_operation(&mut status_only).description = "new".into();
        assert!(!admit_update(&old, &status_only, m));
        let mut finalized = old.clone();
        finalized.metadata.finalizers = Some(vec!["f".into()]);
        assert!(!admit_update(&old, &finalized, m));
        let annotated = annotate(old.clone(), OPERATION_ANNOTATION, "reconcile");
        assert!(admit_update(&old, &annotated, m));
        assert!(
            !admit_update(&annotated, &old, m),
            "removing the annotation must not trigger"
        );
        assert!(!admit_update(
            &old,
            &annotate(old.clone(), "unrelated", "x"),
            m
        ));
    }

    #[test]
    fn a_pending_migrate_or_restore_is_not_retriggered_by_status_writes() {
        let m = TriggerMode::OperationAnnotation;
        for op in ["migrate", "restore"] {
            let old = annotate(
                with_state(ext("t", None), Some(OperationState::Processing)),
                OPERATION_ANNOTATION,
                op,
            );
            let mut failed = old.clone();
            last_operation(&mut failed).state = OperationState::Error;
            assert!(!admit_update(&old, &failed, m), "{op}: own Error status");
            let mut finalized = old.clone();
            finalized.metadata.finalizers = Some(vec!["f".into()]);
            assert!(!admit_update(&old, &finalized, m), "{op}: finalizer");
            // gardenlet asking again (a new timestamp) or changing the spec still passes.
            let asked = annotate(old.clone(), TIMESTAMP_ANNOTATION, "2026-01-01T00:00:00Z");
            assert!(admit_update(&old, &asked, m), "{op}: new request");
            let mut changed = old.clone();
            changed.spec.provider_config = Some(serde_json::json!({"a": 1}));
            assert!(admit_update(&old, &changed, m), "{op}: spec change");
        }
    }

    #[test]
    fn updates_during_deletion_pass_unless_only_the_status_changed() {
        let m = TriggerMode::OperationAnnotation;
        let mut old = with_state(ext("t", None), Some(OperationState::Succeeded));
        old.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let touched = annotate(old.clone(), "gardener.cloud/timestamp", "now");
        assert!(admit_update(&old, &touched, m));
        let mut status_only = old.clone();
        last_operation(&mut status_only).state = OperationState::Processing;
        assert!(!admit_update(&old, &status_only, m));
    }

    #[test]
    fn generation_mode_admits_spec_changes_and_migrate_restore() {
        let m = TriggerMode::GenerationChanged;
        let mut old = ext("t", None);
        old.metadata.generation = Some(1);
        let mut newer = old.clone();
        newer.metadata.generation = Some(2);
        assert!(admit_update(&old, &newer, m));
        assert!(!admit_update(
            &old,
            &annotate(old.clone(), OPERATION_ANNOTATION, "reconcile"),
            m
        ));
        assert!(admit_update(
            &old,
            &annotate(old.clone(), OPERATION_ANNOTATION, "migrate"),
            m
        ));
    }

    #[test]
    fn failed_shoots_and_missing_clusters_drop_events() {
        let mut failed = Shoot::default();
        failed.status.last_operation = Some(LastOperation {
            description: String::new(),
            last_update_time: Time(jiff::Timestamp::UNIX_EPOCH),
            progress: 0,
            state: OperationState::Failed,
            type_: OperationType::Reconcile,
        });
        assert!(shoot_not_failed::<()>(None));
        assert!(!shoot_not_failed::<()>(Some(Err(()))));
        assert!(!shoot_not_failed::<()>(Some(Ok(Some(&failed)))));
        assert!(shoot_not_failed::<()>(Some(Ok(Some(&Shoot::default())))));
        assert!(shoot_not_failed::<()>(Some(Ok(None))));
    }
}
